"""Driving an `LLMConcurrencyManager` step by step in tests: hold and release permits, let waiters take a step."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from concurrency.live import settings_forget
from concurrency.manager import LLMConcurrencyManager, LLMPermit, reset_manager


@contextlib.contextmanager
def fresh_process_state() -> Iterator[None]:
    """No live settings applied and no manager built in this process, before the body and after it."""
    settings_forget()
    reset_manager()
    try:
        yield
    finally:
        settings_forget()
        reset_manager()


async def settle(rounds: int = 3) -> None:
    """Let every ready task run `rounds` steps (a new task reaches its queue wait in one step)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def hold(m: LLMConcurrencyManager, backend: str = "b") -> LLMPermit:
    """A permit taken and kept until `release`."""
    permit = m.acquire(backend)
    await permit.__aenter__()
    return permit


async def release(permit: LLMPermit) -> None:
    await permit.__aexit__(None, None, None)
