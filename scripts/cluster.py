"""A local cluster: N daphne workers behind Debian's nginx, on this machine's Redis and PostgreSQL.

    python scripts/cluster.py --workers 2 --port 8080          # `make cluster WORKERS=2 PORT=8080`

Renders `deploy/nginx/helpcentre.conf` for the workers' ports, migrates the database, builds the index if it is
empty, collects the static files nginx serves, starts the workers and nginx (as a child process with its own
prefix folder, so no root and no system nginx are needed), and waits until every worker is ready
(`/api/v1/ready`). Ctrl-C stops everything, each worker draining as on any SIGTERM. `kill -HUP <this pid>`
restarts the workers one at a time (a rolling restart: each drains while nginx sends new asks to the others).

The environment is the workers' environment: `DATABASE_URL` and `REDIS_URL` default to this machine's servers
(database `helpcentre`, created if missing). The test `tests/deploy/test_nginx_cluster.py` drives the same class.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit, urlunsplit

import httpx

PROJECT_DIR = Path(__file__).resolve().parents[1]
NGINX_SITE = PROJECT_DIR / "deploy" / "nginx" / "helpcentre.conf"
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/helpcentre"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
MIME_TYPES = Path("/etc/nginx/mime.types")


def _marked(text: str, name: str, lines: Sequence[str]) -> str:
    """`text` with the lines between `# <name>-begin` and `# <name>-end` replaced (indentation kept)."""
    pattern = re.compile(rf"^(\s*)# {name}-begin[^\n]*\n.*?^\s*# {name}-end[^\n]*\n", re.S | re.M)
    match = pattern.search(text)
    if match is None:
        raise ValueError(f"{NGINX_SITE.name} has no '# {name}-begin' ... '# {name}-end' block")
    indent = match.group(1)
    return text[: match.start()] + "".join(f"{indent}{line}\n" for line in lines) + text[match.end() :]


def render_site(template: str, *, ports: Sequence[int], listen: int, static_root: Path) -> str:
    """The site file for workers on `ports` (127.0.0.1), nginx listening on `listen`."""
    servers = [f"server 127.0.0.1:{port} max_fails=0;" for port in ports]
    text = _marked(template, "upstreams", servers)
    text = _marked(text, "listen", [f"listen 127.0.0.1:{listen};"])
    static = [
        "location /static/ {",
        f"    alias {static_root}/;",
        "    expires 7d;",
        "    access_log off;",
        "    gzip on;",
        "    gzip_types text/css application/javascript image/svg+xml;",
        "}",
    ]
    return _marked(text, "static", static)


def render_main(prefix: Path, site: Path) -> str:
    """A whole nginx.conf that keeps every file under `prefix` and runs in the foreground."""
    mime = f"include {MIME_TYPES};" if MIME_TYPES.exists() else "default_type application/octet-stream;"
    temp = "\n".join(
        f"    {kind}_temp_path {prefix / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    # Started by root, nginx's workers would drop to `nobody`, who cannot read a private temp folder: a local
    # cluster's workers stay the user that owns its files (the deploy recipe's system nginx keeps its own user).
    user = "user root;\n" if os.geteuid() == 0 else ""
    return f"""daemon off;
{user}worker_processes 1;
pid {prefix / "nginx.pid"};
error_log {prefix / "error.log"} warn;
events {{ worker_connections 1024; }}
http {{
    {mime}
    access_log {prefix / "access.log"};
{temp}
    include {site};
}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_postgres_database(url: str) -> None:
    """Create the database `url` names on its server if it does not exist (PostgreSQL URLs only)."""
    if not url.startswith(("postgres://", "postgresql://")):
        return
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as connection:
        if connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            connection.execute(f'CREATE DATABASE "{name}"')


def manage(env: Mapping[str, str], *command: str, quiet: bool = False) -> None:
    """`manage.py COMMAND` with the workers' environment (its output to ours, or nowhere when `quiet`)."""
    output = subprocess.DEVNULL if quiet else None
    subprocess.run(
        [sys.executable, str(PROJECT_DIR / "manage.py"), *command], cwd=PROJECT_DIR, env=env, check=True, stdout=output
    )


def prepare(env: Mapping[str, str], *, static: bool = True, quiet: bool = False) -> None:
    """What workers on `env` need before they start: their database (created when PostgreSQL has none by its name)
    migrated, the index built if it is empty, and with `static` the static files nginx serves collected."""
    ensure_postgres_database(env.get("DATABASE_URL", ""))
    manage(env, "migrate", "--noinput", "-v", "0", quiet=quiet)
    manage(env, "reindex", "--if-empty", quiet=quiet)
    if static:
        manage(env, "collectstatic", "--noinput", "-v", "0", quiet=quiet)


class WorkerProcess:
    """One daphne worker on a fixed port (a restart takes the same port, as under systemd)."""

    def __init__(self, port: int, env: Mapping[str, str], log_dir: Path) -> None:
        self.port = port
        self.env = dict(env)
        self.log_path = log_dir / f"worker-{port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The worker's command line after `python`: daphne on its port (a subclass may put e.g. cProfile first)."""
        return ["-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "chatbot.asgi:application"]

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, *self.command()], cwd=PROJECT_DIR, env=self.env, stdout=log, stderr=log
            )

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                break
            try:
                if httpx.get(self.url + "/api/v1/ready", timeout=5.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"worker on port {self.port} did not become ready; its log:\n{self.log_tail()}")

    def stop(self, timeout: float = 60.0) -> float:
        """SIGTERM (the worker drains) and wait for it to exit; the seconds it took."""
        started = time.monotonic()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return time.monotonic() - started

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:] if self.log_path.exists() else ""


class Cluster:
    def __init__(
        self,
        *,
        workers: int,
        port: int,
        env: Mapping[str, str],
        folder: Path | None = None,
        worker_ports: Sequence[int] = (),
        worker_class: type[WorkerProcess] = WorkerProcess,
    ) -> None:
        """`workers` daphne workers (of `worker_class`) on `worker_ports`, else on free ports, behind nginx on
        `port`."""
        if worker_ports and len(worker_ports) != workers:
            raise ValueError(f"{workers} workers but {len(worker_ports)} worker ports")
        if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
            raise RuntimeError("nginx is not installed (Debian: apt-get install nginx)")
        self.nginx_binary = shutil.which("nginx") or "/usr/sbin/nginx"
        self.port = port
        self.env = dict(env)
        self.folder = folder or Path(tempfile.mkdtemp(prefix="helpcentre-cluster-"))
        self.folder.mkdir(parents=True, exist_ok=True)
        self.nginx_prefix = self.folder / "nginx"
        ports = list(worker_ports) or [free_port() for _ in range(workers)]
        self.workers = [worker_class(port, self.env, self.folder) for port in ports]
        self.nginx: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def prepare(self) -> None:
        """The database, the index and the static files the workers and nginx need (`prepare`)."""
        prepare(self.env)

    def write_nginx_conf(self) -> Path:
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self.nginx_prefix / kind).mkdir(parents=True, exist_ok=True)
        static_root = Path(self.env.get("DATA_DIR", PROJECT_DIR / "var")) / "static"
        site = self.nginx_prefix / "helpcentre.conf"
        ports = [worker.port for worker in self.workers]
        site.write_text(render_site(NGINX_SITE.read_text(), ports=ports, listen=self.port, static_root=static_root))
        main = self.nginx_prefix / "nginx.conf"
        main.write_text(render_main(self.nginx_prefix, site))
        return main

    def start(self) -> None:
        for worker in self.workers:
            worker.start()
        for worker in self.workers:
            worker.wait_ready()
        main = self.write_nginx_conf()
        subprocess.run([self.nginx_binary, "-t", "-q", "-p", str(self.nginx_prefix), "-c", str(main)], check=True)
        log = (self.nginx_prefix / "nginx.out").open("ab")
        self.nginx = subprocess.Popen(
            [self.nginx_binary, "-p", str(self.nginx_prefix), "-c", str(main)], stdout=log, stderr=log
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/api/v1/health", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError(f"nginx did not answer on {self.url}: {(self.nginx_prefix / 'error.log').read_text()}")

    def rolling_restart(self, settle: float = 1.0) -> list[float]:
        """Restart the workers one at a time, each drained (SIGTERM) and ready again (then `settle` seconds more)
        before the next; the seconds each took to exit."""
        took = []
        for worker in self.workers:
            took.append(worker.stop())
            worker.start()
            worker.wait_ready()
            time.sleep(settle)
        return took

    def stop(self) -> None:
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is None:
                worker.process.terminate()
        for worker in self.workers:
            worker.stop()
        if self.nginx is not None and self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGQUIT)  # nginx's graceful stop
            try:
                self.nginx.wait(10)
            except subprocess.TimeoutExpired:
                self.nginx.kill()
                self.nginx.wait(5)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="daphne workers (default 2)")
    parser.add_argument("--port", type=int, default=8080, help="nginx's port (default 8080)")
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)
    env.setdefault("REDIS_URL", DEFAULT_REDIS_URL)
    cluster = Cluster(workers=args.workers, port=args.port, env=env, folder=PROJECT_DIR / "var" / "cluster")
    cluster.prepare()
    restart_requested = False

    def on_hup(signum: int, frame: FrameType | None) -> None:
        nonlocal restart_requested
        restart_requested = True

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # stop everything below, as Ctrl-C does

    signal.signal(signal.SIGHUP, on_hup)
    signal.signal(signal.SIGTERM, on_term)
    try:
        cluster.start()
        ports = ", ".join(str(worker.port) for worker in cluster.workers)
        print(
            f"Chat: {cluster.url}/  (workers on {ports}; logs in {cluster.folder}; "
            f"kill -HUP {os.getpid()} restarts them one by one)"
        )
        while True:
            time.sleep(0.5)
            if restart_requested:
                restart_requested = False
                print("rolling restart: " + ", ".join(f"{s:.1f} s" for s in cluster.rolling_restart()))
            for worker in cluster.workers:
                if worker.process is not None and worker.process.poll() is not None:
                    print(f"worker {worker.port} exited ({worker.process.returncode}); restarting it")
                    worker.start()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
