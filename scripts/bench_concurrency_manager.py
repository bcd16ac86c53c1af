#!/usr/bin/env python
"""Micro-benchmark: per-acquire overhead of LLMConcurrencyManager, uncontended and contended.

Stdlib only. Prints the median of several runs, next to asyncio.Semaphore as a baseline, and the cost of
the loop itself (no lock) so the lock's own overhead can be read off.

    .venv/bin/python scripts/bench_concurrency_manager.py [--runs 7] [--n 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable, Coroutine, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from concurrency.context import request_scope
from concurrency.manager import LLMConcurrencyManager

LockFactory = Callable[[], Callable[[], AbstractAsyncContextManager[object]]]


class _NoLock:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


def no_lock() -> Callable[[], AbstractAsyncContextManager[object]]:
    lock = _NoLock()
    return lambda: lock


def semaphore(limit: int) -> LockFactory:
    def make() -> Callable[[], AbstractAsyncContextManager[object]]:
        sem = asyncio.Semaphore(limit)
        return lambda: sem

    return make


def manager(limit: int, *, priority: bool = False) -> LockFactory:
    def make() -> Callable[[], AbstractAsyncContextManager[object]]:
        m = LLMConcurrencyManager({"chat": limit}, priority_enabled=priority, max_waiters=100_000)
        return lambda: m.acquire("chat")

    return make


async def uncontended(factory: LockFactory, n: int) -> float:
    acquire = factory()
    start = time.perf_counter()
    for _ in range(n):
        async with acquire():
            pass
    return (time.perf_counter() - start) / n


async def contended(factory: LockFactory, n: int, tasks: int = 64) -> float:
    """`tasks` workers share `n` acquisitions; each holds its permit across one loop step (await sleep(0))."""
    acquire = factory()
    per_task = n // tasks

    async def worker(i: int) -> None:
        with request_scope(f"r{i}") as ctx:
            ctx.completed_calls = i % 4  # distinct priorities for priority mode
            for _ in range(per_task):
                async with acquire():
                    await asyncio.sleep(0)

    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(tasks)))
    return (time.perf_counter() - start) / (per_task * tasks)


def interleaved_medians(benches: Mapping[str, Callable[[], Coroutine[Any, Any, float]]], runs: int) -> dict[str, float]:
    """Median ns per variant; variants alternate within each round so machine drift hits all alike."""
    samples: dict[str, list[float]] = {label: [] for label in benches}
    for _ in range(runs):
        for label, bench in benches.items():
            samples[label].append(asyncio.run(bench()) * 1e9)
    return {label: statistics.median(values) for label, values in samples.items()}


def report(title: str, results: dict[str, float]) -> None:
    print(f"\n{title}")
    base = results["no lock (loop cost)"]
    for label, ns in results.items():
        print(f"  {label:<22} {ns:8.0f} ns   (+{ns - base:5.0f} ns over no lock)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--n", type=int, default=200_000, help="acquisitions per run")
    args = parser.parse_args()
    runs, n = args.runs, args.n
    print(f"python {sys.version.split()[0]}, median of {runs} runs, {n} acquisitions per run")

    factories: dict[str, tuple[LockFactory, LockFactory]] = {
        # label: (uncontended factory with limit 8, contended factory with limit 4)
        "no lock (loop cost)": (no_lock, no_lock),
        "asyncio.Semaphore": (semaphore(8), semaphore(4)),
        "manager fifo": (manager(8), manager(4)),
        "manager priority": (manager(8, priority=True), manager(4, priority=True)),
    }
    uncontended_runs = {label: (lambda f=f: uncontended(f, n)) for label, (f, _) in factories.items()}
    report(
        "uncontended (one task, permit always free), ns per acquire+release:",
        interleaved_medians(uncontended_runs, runs),
    )
    contended_runs = {label: (lambda f=f: contended(f, n)) for label, (_, f) in factories.items()}
    report(
        "contended (64 tasks, limit 4, body = one loop step), ns per acquisition:",
        interleaved_medians(contended_runs, runs),
    )


if __name__ == "__main__":
    main()
