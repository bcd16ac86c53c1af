"""A cluster of daphne workers behind nginx for end-to-end tests (`scripts.cluster.Cluster`), on a database of
its own (PostgreSQL when the suite runs against it, else a SQLite file) and the suite's Redis when it has one."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.cluster import Cluster, free_port
from tests.daphne_workers import worker_env

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)


@contextlib.contextmanager
def running_cluster(label: str, *, workers: int = 2, **extra_env: str) -> Iterator[Cluster]:
    """`workers` daphne workers behind nginx, prepared (migrated, indexed, static files collected) and ready."""
    if NGINX is None:
        pytest.skip("nginx is not installed (Debian: apt-get install nginx)")
    # the cluster prepares its database itself (migrate, reindex, collectstatic)
    redis_url = os.environ.get("REDIS_URL", "")
    with worker_env(label, redis_url=redis_url, prepare=False, **extra_env) as env:
        cluster = Cluster(workers=workers, port=free_port(), env=env, folder=Path(env["DATA_DIR"]) / "cluster")
        cluster.prepare()
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()
