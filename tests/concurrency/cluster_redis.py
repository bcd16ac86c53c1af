"""Helpers for the cluster-limit tests: the suite's Redis (skipped without ``REDIS_URL``), and a Redis server of a
test's own that it can stop and start again (an outage)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from concurrency.simulator.testing import free_port


def suite_redis_url() -> str:
    """``REDIS_URL`` of the run; the test is skipped (saying why) without it or when that Redis does not answer."""
    url = os.environ.get("REDIS_URL", "")
    if not url:
        pytest.skip("cluster-wide LLM limits need Redis: set REDIS_URL (e.g. redis://127.0.0.1:6379/7) to run this")
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        pytest.skip(f"REDIS_URL={url} does not answer ({exc})")
    finally:
        client.close()
    return url


@contextlib.contextmanager
def fresh_prefix(url: str, label: str) -> Iterator[str]:
    """A key prefix of the test's own on ``url``; its keys are deleted afterwards."""
    prefix = f"{label}-{uuid.uuid4().hex[:10]}"
    try:
        yield prefix
    finally:
        client = redis.Redis.from_url(url, socket_timeout=2.0)
        for key in client.scan_iter(f"{prefix}:*"):
            client.delete(key)
        client.close()


class OwnRedis:
    """A ``redis-server`` on a free port, which the test can stop (SIGKILL: an outage) and start again."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed: the Redis outage test starts a server of its own")
        self.binary = binary
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = tempfile.TemporaryDirectory(prefix="own-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        command += ["--dir", self.dir.name]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.2, socket_timeout=0.5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(redis.RedisError, OSError):
                client.ping()
                client.close()
                return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

    def close(self) -> None:
        self.kill()
        self.dir.cleanup()
