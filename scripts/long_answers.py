#!/usr/bin/env python
"""Long answers end to end: N answers of about `--seconds` each over SSE and over WebSocket, through a real daphne
worker and the LLM simulator, with the channel layer on Redis when `--redis-url` (or REDIS_URL) is given.

Each answer must arrive whole: seq 1..n without a gap and exactly one terminal event, a `meta_summary`. Prints one
line per transport (whole answers out of N, events per answer, seconds per answer) and exits 1 if any was not.

    REDIS_URL=redis://127.0.0.1:6379/11 .venv/bin/python scripts/long_answers.py [--answers 20] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.answer_worker import answer_worker_env, llm_simulator  # noqa: E402
from tests.daphne_workers import Worker  # noqa: E402
from tests.stream_clients import Answer, asse_ask, ws_ask  # noqa: E402

QUESTION = "如何重設密碼？"
TPOT_MS = 150.0


def report(transport: str, answers: list[Answer], seconds: list[float]) -> bool:
    whole = [a for a in answers if a.whole() and a.terminal is not None and a.terminal["channel"] == "meta_summary"]
    events = [len(a.events) for a in answers]
    print(
        f"{transport}: {len(whole)}/{len(answers)} whole, events per answer min {min(events)} max {max(events)}, "
        f"seconds per answer min {min(seconds):.1f} median {statistics.median(seconds):.1f} max {max(seconds):.1f}"
    )
    for answer in answers:
        if answer not in whole:
            print(f"  broken: {answer.describe()}")
    return len(whole) == len(answers)


async def timed(coroutine: Coroutine[Any, Any, Answer]) -> tuple[Answer, float]:
    started = time.monotonic()
    answer = await coroutine
    return answer, time.monotonic() - started


async def run_all(url: str, answers: int, within: float) -> bool:
    sse = [timed(asse_ask(url, QUESTION, read_seconds=within)) for _ in range(answers)]
    ws = [timed(ws_ask(url, QUESTION, within=within)) for _ in range(answers)]
    results = await asyncio.gather(*sse, *ws)
    sse_ok = report("SSE", [a for a, _ in results[:answers]], [s for _, s in results[:answers]])
    ws_ok = report("WebSocket", [a for a, _ in results[answers:]], [s for _, s in results[answers:]])
    return sse_ok and ws_ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--answers", type=int, default=20, help="answers per transport, all at once")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each answer streams (at least)")
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL", ""), help="the channel layer's Redis")
    args = parser.parse_args()
    tokens = int(args.seconds * 1000 / TPOT_MS) + 1
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()}")
    print(f"redis: {args.redis_url or '(none: in-memory layer)'}; {tokens} tokens {TPOT_MS:.0f} ms apart per answer")
    with (
        llm_simulator(tpot_ms=TPOT_MS, output_tokens=tokens, max_num_seqs=2 * args.answers + 8) as simulator,
        answer_worker_env(simulator.base_url, redis_url=args.redis_url, label="long-answers") as env,
    ):
        worker = Worker(env)
        try:
            worker.wait_ready()
            ok = asyncio.run(run_all(worker.url, args.answers, within=args.seconds * 4 + 60))
            worker.log.seek(0)
            log = worker.log.read().decode("utf-8", "replace")
            errors = [line for line in log.splitlines() if "Exception inside application" in line]
            print(f"worker log: {len(errors)} 'Exception inside application'")
        finally:
            worker.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
