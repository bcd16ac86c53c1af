"""Helpers for the cluster-limit tests: the suite's Redis (skipped without ``REDIS_URL``) and a key prefix of a
test's own on it."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import pytest
import redis


def suite_redis_url(what: str = "cluster-wide LLM limits") -> str:
    """``REDIS_URL`` of the run; the test is skipped (saying why) without it or when that Redis does not answer."""
    url = os.environ.get("REDIS_URL", "")
    if not url:
        pytest.skip(f"{what} need Redis: set REDIS_URL (e.g. redis://127.0.0.1:6379/7) to run this")
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
