"""Private Redis and PostgreSQL servers a test can stop and start again, on free loopback ports of their own.

For what an outage does to a running worker: the machine's own servers are shared by the rest of the suite and
must never be stopped. Each test that needs one skips, saying why, where the server binaries are missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from devtools.simulator.testing import free_port
from tests.waiting import wait_for

POSTGRES_BINS = ("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin")


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait_listening(port: int, up: bool, within: float = 20.0) -> None:
    wait_for(lambda: _listening(port) == up, within=within, interval=0.05, note=f"port {port}: listening is not {up}")


class PrivateRedis:
    """`redis-server` on a free port, keeping nothing on disk."""

    def __init__(self) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self.binary is not None
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_listening(self.port, up=True)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None
        _wait_listening(self.port, up=False)


class PrivatePostgres:
    """A throw-away PostgreSQL cluster (initdb, trust auth) in a temporary folder, on a free port."""

    def __init__(self) -> None:
        bindir = next((Path(b) for b in POSTGRES_BINS if (Path(b) / "initdb").exists()), None)
        if bindir is None:
            pytest.skip("PostgreSQL's server binaries are not installed (Debian: apt-get install postgresql)")
        self.bindir = bindir
        # initdb refuses to run as root: as root, the cluster belongs to the `postgres` user
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                pytest.skip("running as root without runuser: cannot start a private PostgreSQL")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.folder = Path(tempfile.mkdtemp(prefix="private-pg-"))
        if self.as_user:
            shutil.chown(self.folder, user="postgres")
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        self._run("initdb", "-D", str(self.folder / "data"), "-A", "trust", "-U", "postgres", "--no-sync")

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run([*self.as_user, str(self.bindir / tool), *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed: {done.stdout[-1000:]}{done.stderr[-1000:]}")

    def _ctl(self, *args: str) -> None:
        self._run("pg_ctl", "-D", str(self.folder / "data"), "-w", *args)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._ctl("-o", options, "-l", str(self.folder / "log"), "start")
        _wait_listening(self.port, up=True)

    def stop(self) -> None:
        self._ctl("-m", "immediate", "stop")
        _wait_listening(self.port, up=False)

    def remove(self) -> None:
        if _listening(self.port):
            self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
