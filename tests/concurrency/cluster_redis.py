"""Helpers for the cluster-limit tests: the suite's Redis (skipped without ``REDIS_URL``) and a key prefix of a
test's own on it."""

from __future__ import annotations

import os

import pytest
import redis

from tests.daphne_workers import redis_key_prefix

# A key prefix of the test's own on a Redis URL, its keys deleted afterwards: the one rule the worker tests use too.
fresh_prefix = redis_key_prefix


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
