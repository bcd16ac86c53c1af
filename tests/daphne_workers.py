"""Real daphne worker processes for end-to-end tests: started, waited for, read and stopped.

Several workers behind one database and one Redis are how the project scales out; tests that show something
reaching every worker start them with `running_workers` and keep their Redis keys apart with `redis_key_prefix`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from devtools.simulator.testing import free_port
from tests.waiting import poll

PROJECT_DIR = Path(__file__).resolve().parents[1]
ASGI_APP = "chatbot.asgi:application"
DEMO = PROJECT_DIR / "rag" / "corpus" / "demo"
SQLITE = "db.sqlite3"  # the database file in DATA_DIR when DATABASE_URL is empty (chatbot.settings)


class Worker:
    """One `daphne` process on a free loopback port, its output kept in a temporary file."""

    def __init__(self, env: dict[str, str], app: str = ASGI_APP) -> None:
        self.env = env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), app]
        self.process = subprocess.Popen(command, cwd=PROJECT_DIR, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.http = httpx.Client(base_url=self.url, timeout=5.0)

    def wait_ready(self, timeout: float = 60.0) -> None:
        def state() -> str:
            if self.process.poll() is not None:
                return "exited"
            try:
                return "ready" if self.http.get("/admin/login/").status_code == 200 else ""
            except httpx.TransportError:
                return ""

        if poll(state, within=timeout, interval=0.1) != "ready":
            pytest.fail(f"daphne on port {self.port} did not start:\n{self.output()}")

    def login(self, username: str, password: str) -> None:
        """Through the admin's login form, as a person would (`self.http` then carries the session)."""
        page = self.http.get("/admin/login/")
        match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert match, page.text[:300]
        response = self.http.post(
            "/admin/login/?next=/admin/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": match.group(1), "next": "/admin/"},
        )
        assert response.status_code == 302, response.text[:500]

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-4000:]

    def stop(self) -> None:
        self.http.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log.close()


@contextlib.contextmanager
def running_workers(envs: Sequence[dict[str, str]], app: str = ASGI_APP) -> Iterator[tuple[Worker, ...]]:
    """One worker per environment, all answering before the body runs, all stopped after it."""
    workers: list[Worker] = []
    try:
        for env in envs:
            workers.append(Worker(env, app))
        for worker in workers:
            worker.wait_ready()
        yield tuple(workers)
    finally:
        for worker in workers:
            worker.stop()


def new_key_prefix(label: str) -> str:
    """A Redis key prefix no other test or run uses: `label`, then ten random hex digits."""
    return f"{label}-{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def redis_key_prefix(url: str, label: str) -> Iterator[str]:
    """A fresh key prefix on the Redis at `url` (skips the test when it does not answer); every key under it is
    deleted afterwards. "Under it" as the channel layer has it (its flush deletes `<prefix>*`): its channel keys
    follow the prefix without a colon, the app's own keys after `<prefix>:`."""
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        client.ping()
    except (redis.RedisError, OSError):
        client.close()
        pytest.skip(f"Redis does not answer on {url}")
    prefix = new_key_prefix(label)
    try:
        yield prefix
    finally:
        with contextlib.suppress(redis.RedisError, OSError):
            for key in client.scan_iter(f"{prefix}*"):
                client.delete(key)
        client.close()


def _postgres_admin_url(base: str) -> str:
    return urlunsplit(urlsplit(base)._replace(path="/postgres"))


@contextlib.contextmanager
def shared_database(label: str, *, template: str = "") -> Iterator[str]:
    """A fresh database for worker processes to share, as a DATABASE_URL: on the PostgreSQL server the suite runs
    against (`DATABASE_URL`), else a SQLite file in a temporary folder ("" stands for that: the workers get
    `DATA_DIR`'s file). Empty, or on PostgreSQL a copy of the database `template`. Dropped afterwards."""
    base = os.environ.get("DATABASE_URL", "")
    if not base.startswith(("postgres://", "postgresql://")):
        yield ""
        return
    psycopg = pytest.importorskip("psycopg")
    name = f"{label}_{uuid.uuid4().hex[:10]}"
    admin_url = _postgres_admin_url(base)
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    try:
        yield urlunsplit(urlsplit(base)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- the prepared deployment: migrated and indexed once per session, copied for each worker environment ----------

# Variables that do not change what `migrate` and `reindex` write: environments that differ only in these share
# one prepared database.
INDEXING = ("EMBEDDING_", "RAG_", "QDRANT_", "INDEX_", "CHUNK_")
NOT_INDEXING = ("LLM_", "LANGFUSE_", "RAG_RATE_LIMIT", "RAG_SEMANTIC_CACHE", "DJANGO_SUPERUSER_", "PUBLIC_BASE_URL")


@dataclass(frozen=True)
class Prepared:
    """A migrated database with the demo corpus indexed from `corpus`: a SQLite file, or a PostgreSQL database
    that `CREATE DATABASE ... TEMPLATE` copies."""

    corpus: str
    sqlite: str = ""
    postgres: str = ""


_prepared: dict[tuple[tuple[str, str], ...], Prepared] = {}
_prepared_root: list[str] = []


def _prepared_cleanup() -> None:
    base = os.environ.get("DATABASE_URL", "")
    names = [prepared.postgres for prepared in _prepared.values() if prepared.postgres]
    if names:
        import psycopg

        with contextlib.suppress(psycopg.Error), psycopg.connect(_postgres_admin_url(base), autocommit=True) as admin:
            for name in names:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    for root in _prepared_root:
        shutil.rmtree(root, ignore_errors=True)
    _prepared.clear()


def prepared_deployment(env: dict[str, str]) -> Prepared:
    """The session's migrated and indexed database for environments like `env`, made the first time it is asked
    for (`migrate` and `reindex` are the slowest part of starting a worker; done once, each environment copies the
    result). Keyed by the variables that could change what is indexed; removed when the test process exits."""
    key = tuple(
        sorted(
            (name, value)
            for name, value in env.items()
            if name.startswith(("EMBEDDING_", "RAG_", "QDRANT_", "INDEX_", "CHUNK_"))
            and not name.startswith(NOT_INDEXING)
        )
    )
    if key in _prepared:
        return _prepared[key]
    if not _prepared_root:
        _prepared_root.append(tempfile.mkdtemp(prefix="prepared-deployment-"))
        atexit.register(_prepared_cleanup)
    folder = Path(_prepared_root[0]) / str(len(_prepared))
    corpus = folder / "corpus"
    shutil.copytree(DEMO, corpus)
    (folder / "data").mkdir()
    build = {
        **env,
        "DATA_DIR": str(folder / "data"),
        "CORPUS_DIR": str(corpus),
        "REDIS_URL": "",
        "LLM_BASE_URL": "",
    }
    postgres = ""
    if env.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        import psycopg

        postgres = f"prepared_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(_postgres_admin_url(env["DATABASE_URL"]), autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'CREATE DATABASE "{postgres}"')
        build["DATABASE_URL"] = urlunsplit(urlsplit(env["DATABASE_URL"])._replace(path=f"/{postgres}"))
    prepared = Prepared(corpus=str(corpus), postgres=postgres, sqlite="" if postgres else str(folder / "data" / SQLITE))
    _prepared[key] = prepared  # before the commands: a failed build is dropped with the rest
    manage(build, "migrate", "--noinput")
    manage(build, "reindex")
    return prepared


def sqlite_copy(source: str, target: str) -> None:
    """A consistent copy of a SQLite database (its backup API, not a file copy that could miss the WAL)."""
    with contextlib.closing(sqlite3.connect(source)) as src, contextlib.closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


@contextlib.contextmanager
def worker_env(
    label: str,
    *,
    llm_base_url: str = "",
    redis_url: str = "",
    prepare: bool | Literal["own corpus"] = True,
    **extra: str,
) -> Iterator[dict[str, str]]:
    """The one environment builder of test workers and the processes beside them: a data folder of their own, a
    database of their own (`shared_database`), Redis keys under a prefix of their own (`redis_key_prefix`: the test
    is skipped when that Redis does not answer; no Redis when `redis_url` is empty), no Qdrant, the LLM at
    `llm_base_url` ("": none), no rate limit, and `extra` variables on top.

    With `prepare` the database is migrated and the demo corpus indexed: a copy of the session's prepared
    deployment (`prepared_deployment`), whose corpus folder is shared and must not be written to; a test that
    changes documents asks for `prepare="own corpus"` (a copy in its data folder, migrated and indexed for it
    alone)."""
    with contextlib.ExitStack() as stack:
        # first: a Redis that does not answer skips the test before anything is made (without Redis the prefix
        # names nothing shared, but every worker environment has one)
        prefix = stack.enter_context(redis_key_prefix(redis_url, label)) if redis_url else new_key_prefix(label)
        data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"{label}-"))
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "chatbot.settings",
            "DATA_DIR": data_dir,
            "REDIS_URL": redis_url,
            "REDIS_PREFIX": prefix,
            "QDRANT_URL": "",
            "LLM_BASE_URL": llm_base_url,
            "RAG_RATE_LIMIT_PER_MINUTE": "0",
            "PYTHONUNBUFFERED": "1",
            **extra,
        }
        prepared = prepared_deployment(env) if prepare is True else None
        env["DATABASE_URL"] = stack.enter_context(
            shared_database(label.replace("-", "_"), template=prepared.postgres if prepared else "")
        )
        if prepared is not None:
            env["CORPUS_DIR"] = prepared.corpus
            if prepared.sqlite:
                sqlite_copy(prepared.sqlite, str(Path(data_dir) / SQLITE))
        else:
            corpus = Path(data_dir) / "corpus"
            shutil.copytree(DEMO, corpus)
            env["CORPUS_DIR"] = str(corpus)
            if prepare:
                manage(env, "migrate", "--noinput")
                manage(env, "reindex")
        yield env


def manage(env: dict[str, str], *command: str, timeout: float = 120.0) -> str:
    """`manage.py COMMAND` with the workers' environment; its output (fails the test when it fails)."""
    done = subprocess.run(
        [sys.executable, str(PROJECT_DIR / "manage.py"), *command],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        pytest.fail(f"manage.py {' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return done.stdout
