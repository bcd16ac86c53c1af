"""A cluster of daphne workers behind nginx for end-to-end tests (`scripts.cluster.Cluster`), on a database of
its own (PostgreSQL when the suite runs against it, else a SQLite file) and the suite's Redis when it has one."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.cluster import Cluster, free_port
from tests.daphne_workers import redis_key_prefix, shared_database

DEMO = Path(__file__).resolve().parents[2] / "rag" / "corpus" / "demo"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)


@contextlib.contextmanager
def _prefix(redis_url: str, label: str) -> Iterator[str]:
    if not redis_url:
        yield "helpcentre"
        return
    with redis_key_prefix(redis_url, label) as prefix:
        yield prefix


@contextlib.contextmanager
def running_cluster(label: str, *, workers: int = 2, **extra_env: str) -> Iterator[Cluster]:
    """`workers` daphne workers behind nginx, prepared (migrated, indexed, static files collected) and ready."""
    if NGINX is None:
        pytest.skip("nginx is not installed (Debian: apt-get install nginx)")
    with tempfile.TemporaryDirectory(prefix=f"{label}-") as folder:
        data_dir = Path(folder)
        shutil.copytree(DEMO, data_dir / "corpus")
        redis_url = os.environ.get("REDIS_URL", "")
        with shared_database(label) as database_url, _prefix(redis_url, label) as prefix:
            env = {
                **os.environ,
                "DJANGO_SETTINGS_MODULE": "chatbot.settings",
                "DATA_DIR": str(data_dir),
                "CORPUS_DIR": str(data_dir / "corpus"),
                "DATABASE_URL": database_url,
                "REDIS_URL": redis_url,
                "REDIS_PREFIX": prefix,
                "QDRANT_URL": "",
                "LLM_BASE_URL": "",
                "RAG_RATE_LIMIT_PER_MINUTE": "0",
                "PYTHONUNBUFFERED": "1",
                **extra_env,
            }
            cluster = Cluster(workers=workers, port=free_port(), env=env, folder=data_dir / "cluster")
            cluster.prepare()
            try:
                cluster.start()
                yield cluster
            finally:
                cluster.stop()
