"""Each test starts with a fresh worker: empty prompt memory and a fake clock."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from prompts.memory import memory
from tests.fake_clock import FakeClock


@pytest.fixture(autouse=True)
def clock() -> Iterator[FakeClock]:
    fake = FakeClock()
    memory.reset()
    memory.clock = fake
    yield fake
    memory.reset()
    memory.clock = time.monotonic


@pytest.fixture(autouse=True)
def fast_password_hasher(settings) -> None:
    # admin_client's superuser is hashed with the slow production hasher otherwise (~0.5 s per test).
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
