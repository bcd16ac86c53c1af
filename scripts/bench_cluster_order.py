#!/usr/bin/env python
"""How closely FIFO and priority order hold across workers drawing LLM permits from one Redis.

Two worker processes (each a manager of cluster-wide permits, ``cluster_manager``, with its own Redis connections,
as two daphne workers have) share one limit. Each makes ``--calls`` calls at random moments (exponential gaps, mean
``--gap-ms``), holding the permit for ``--hold-ms``; every call records when its caller asked (wall clock) and when
it was granted. Order is then compared with the callers' order of asking: an inversion is a pair of calls granted
in the opposite order. In priority mode each call gets a random number of completed calls (0-3), and the expected
order is by priority, then the request's arrival (or oldest first once the starvation threshold has passed).

    REDIS_URL=redis://127.0.0.1:6379/7 .venv/bin/python scripts/bench_cluster_order.py [--mode fifo|priority]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import sys
import time
import uuid
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_DIR))

from concurrency.cluster import RedisPermits, cluster_manager  # noqa: E402
from concurrency.context import request_scope  # noqa: E402


async def worker_calls(args: argparse.Namespace, name: str, prefix: str, seed: int) -> list[dict[str, float]]:
    rng = random.Random(seed)
    manager = cluster_manager(
        {"chat": args.limit},
        RedisPermits(redis_url=args.redis_url, prefix=prefix, worker_id=name),
        priority_enabled=args.mode == "priority",
        starvation_threshold=args.starvation,
        acquire_timeout=120.0,
        max_waiters=10_000,
    )
    records: list[dict[str, float]] = []

    async def call(i: int) -> None:
        completed = rng.randint(0, 3) if args.mode == "priority" else 0
        with request_scope(f"{name}-{i}") as ctx:
            ctx.completed_calls = completed
            asked = time.time()
            async with manager.acquire("chat"):
                records.append({"asked": asked, "granted": time.time(), "priority": -(completed + 1)})
                await asyncio.sleep(args.hold_ms / 1000)

    # wait for the start signal so both workers begin together
    start = float(args.start_at)
    await asyncio.sleep(max(0.0, start - time.time()))
    tasks = []
    for i in range(args.calls):
        tasks.append(asyncio.create_task(call(i)))
        await asyncio.sleep(rng.expovariate(1000 / args.gap_ms))
    await asyncio.gather(*tasks)
    await manager.aclose()
    return records


def run_worker(args: argparse.Namespace, name: str, prefix: str, seed: int, out: str) -> None:
    records = asyncio.run(worker_calls(args, name, prefix, seed))
    Path(out).write_text(json.dumps(records))


def inversions(records: list[dict[str, float]], mode: str) -> tuple[int, int]:
    """(inversions, comparable pairs): pairs where x was granted before y although y was already waiting when x
    was granted and should have gone first (FIFO: asked earlier; priority: higher priority, then asked earlier)."""

    def order(r: dict[str, float]) -> tuple[float, ...]:
        return (r["asked"],) if mode == "fifo" else (r["priority"], r["asked"])

    by_grant = sorted(records, key=lambda r: r["granted"])
    inverted = comparable = 0
    for i, x in enumerate(by_grant):
        for y in by_grant[i + 1 :]:
            if y["asked"] < x["granted"] and x["granted"] > x["asked"]:  # both were waiting
                comparable += 1
                inverted += order(y) < order(x)
    return inverted, comparable


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--mode", choices=("fifo", "priority"), default="fifo")
    parser.add_argument("--limit", type=int, default=2)
    parser.add_argument("--calls", type=int, default=100, help="calls per worker")
    parser.add_argument("--gap-ms", type=float, default=10.0)
    parser.add_argument("--hold-ms", type=float, default=20.0)
    parser.add_argument("--starvation", type=float, default=10.0)
    args = parser.parse_args()
    args.redis_url = os.environ.get("REDIS_URL", "")
    if not args.redis_url:
        sys.exit("set REDIS_URL")
    args.start_at = time.time() + 1.0
    prefix = f"bench-order-{uuid.uuid4().hex[:8]}"
    outs = [f"/tmp/{prefix}-{n}.json" for n in ("A", "B")]
    procs = [
        multiprocessing.Process(target=run_worker, args=(args, name, prefix, seed, out))
        for name, seed, out in (("A", 1, outs[0]), ("B", 2, outs[1]))
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    records = [r for out in outs for r in json.loads(Path(out).read_text())]
    for out in outs:
        Path(out).unlink()
    inv, pairs = inversions(records, args.mode)
    waits = sorted(r["granted"] - r["asked"] for r in records)
    print(
        f"mode={args.mode} limit={args.limit} calls={len(records)} wait p50={1000 * waits[len(waits) // 2]:.1f} ms "
        f"inversions={inv} of {pairs} pairs that waited together ({100 * inv / max(1, pairs):.3f} %)"
    )


if __name__ == "__main__":
    main()
