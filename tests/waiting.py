"""Waiting on a condition in tests: poll it, fail after a bound (never a fixed sleep). The one wait module.

On an event loop: `until(check)` for a condition read in place; `until_async(read, accept)` when reading it has
to be awaited (a Redis call, a blocking read sent to a thread with `asyncio.to_thread`), and for the value it
settles on. In sync code (a thread, a fixture, a test of worker processes): `wait_for(read, accept)`, the same
as `until_async` with a plain call; `poll(check)` when the caller wants the last value even when the bound passed
(a process that waits for a test's go-ahead but must not hang, an assertion of its own on that value).

Every bound is a ceiling on a wait that ends as soon as its condition holds: a loaded machine makes a test
slower, never wrong. A fixed sleep is left only where nothing can be read (a negative check, "this does not
happen within N s", or time itself being what is tested), with a comment saying which.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

INTERVAL = 0.01

Note = str | Callable[[], str]


def _failure(within: float, value: object, note: Note) -> AssertionError:
    message = f"condition not met within {within} s (last value: {value!r})"
    extra = note() if callable(note) else note
    return AssertionError(f"{message}\n{extra}" if extra else message)


async def until_async(
    read: Callable[[], Awaitable[T]],
    accept: Callable[[T], Any] = bool,
    within: float = 5.0,
    interval: float = INTERVAL,
    *,
    note: Note = "",
) -> T:
    """Poll ``await read()`` until ``accept`` takes its value (truthy by default) and return that value; fail after
    ``within`` seconds, naming the last value read (and ``note``, or what it returns, below it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = await read()
        if accept(value):
            return value
        if loop.time() > deadline:
            raise _failure(within, value, note)
        await asyncio.sleep(interval)


async def until(check: Callable[[], Any], within: float = 5.0, interval: float = INTERVAL, *, note: Note = "") -> float:
    """Wait for ``check()`` (polled on the loop) to be truthy; the seconds it took. Fails after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def read() -> Any:
        return check()

    await until_async(read, within=within, interval=interval, note=note)
    return loop.time() - started


def wait_for(
    read: Callable[[], T],
    accept: Callable[[T], Any] = bool,
    within: float = 5.0,
    interval: float = INTERVAL,
    *,
    note: Note = "",
) -> T:
    """Sync `until_async`: call ``read()`` until ``accept`` takes its value (truthy by default) and return that
    value; fail after ``within`` seconds, naming the last value read (and ``note``, or what it returns)."""
    deadline = time.monotonic() + within
    while True:
        value = read()
        if accept(value):
            return value
        if time.monotonic() > deadline:
            raise _failure(within, value, note)
        time.sleep(interval)


def poll(check: Callable[[], T], within: float, interval: float = 0.02) -> T:
    """``check()`` until it is truthy or ``within`` seconds passed; its last result either way (never fails)."""
    deadline = time.monotonic() + within
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(interval)
