#!/usr/bin/env python
"""SIGTERM with answers streaming: what the clients get, what is recorded, how long the worker takes to exit.

Starts the LLM simulator and one daphne worker (`SHUTDOWN_DRAIN_SECONDS=--drain-seconds`), opens `--streams`
answers (half SSE, half WebSocket) of about `--answer-seconds` tokens each, sends SIGTERM once every one of them
is streaming, asks once more over each transport, then prints: terminal events per stream and their kinds, the
refusals, the exchanges recorded in the worker's database, and the time from the signal to the process's exit.

    .venv/bin/python scripts/drain_measure.py [--streams 20] [--drain-seconds 25] [--answer-seconds 40]

With answers longer than the window every stream ends with `unavailable`; with shorter ones they finish.
REDIS_URL and DATABASE_URL (PostgreSQL) are used when set, as a deployment would.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.answer_worker import answer_worker_env, llm_simulator, recorded_exchanges, streams_through_sigterm  # noqa: E402
from tests.daphne_workers import Worker  # noqa: E402

QUESTION = "如何重設密碼？"
TPOT_MS = 150.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=20, help="live answers at the signal (half SSE, half WS)")
    parser.add_argument("--drain-seconds", type=float, default=25.0, help="SHUTDOWN_DRAIN_SECONDS of the worker")
    parser.add_argument("--answer-seconds", type=float, default=40.0, help="the answer's own tokens last this long")
    args = parser.parse_args()
    redis_url = os.environ.get("REDIS_URL", "")
    tokens = int(args.answer_seconds * 1000 / TPOT_MS) + 1
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()}")
    print(
        f"streams {args.streams}, drain window {args.drain_seconds} s, answers of {tokens} tokens {TPOT_MS:.0f} ms "
        f"apart, redis {redis_url or '(none)'}, database {os.environ.get('DATABASE_URL') or '(SQLite)'}"
    )
    sse = args.streams // 2
    with (
        llm_simulator(tpot_ms=TPOT_MS, output_tokens=tokens, max_num_seqs=args.streams + 8) as simulator,
        answer_worker_env(
            simulator.base_url,
            redis_url=redis_url,
            label="drain-measure",
            SHUTDOWN_DRAIN_SECONDS=str(args.drain_seconds),
        ) as env,
    ):
        worker = Worker(env)
        try:
            worker.wait_ready()
            run = asyncio.run(
                streams_through_sigterm(
                    worker,
                    sse=sse,
                    ws=args.streams - sse,
                    question=QUESTION,
                    exit_within=args.drain_seconds + 30,
                    read_seconds=args.drain_seconds + args.answer_seconds * 3 + 60,
                )
            )
        finally:
            worker_log = worker.output()
            worker.stop()
        request_ids = [a.events[0]["request_id"] for a in run.answers if a.events]
        recorded = recorded_exchanges(env, request_ids)
    whole = sum(1 for a in run.answers if a.whole())
    kinds = collections.Counter(
        (a.terminal["channel"] + ("/" + a.terminal["code"] if a.terminal.get("code") else "")) if a.terminal else "none"
        for a in run.answers
    )
    closes = collections.Counter(a.close_code for a in run.answers[sse:])
    print(f"streams whole (one terminal event, last, no gap): {whole}/{len(run.answers)}; terminals: {dict(kinds)}")
    retry = {a.terminal.get("retry_after") for a in run.answers if a.terminal and a.terminal.get("code")}
    print(f"retry_after on 'unavailable': {retry or '-'}; WebSocket close codes: {dict(closes)}")
    print(
        f"new ask after SIGTERM: SSE status {run.refused_sse.status} retry-after "
        f"{run.refused_sse.headers.get('retry-after')} {run.refused_sse.body[:120] or run.refused_sse.error[:120]}; "
        f"WebSocket {[(e.get('code'), e.get('retry_after')) for e in run.refused_ws.events]} "
        f"close {run.refused_ws.close_code} {run.refused_ws.error[:80]}"
    )
    print(f"exchanges recorded: {len(recorded)}/{len(request_ids)} {dict(collections.Counter(recorded.values()))}")
    exit_text = f"{run.exit_seconds:.2f} s" if run.exit_seconds is not None else "did not exit"
    print(f"exit after SIGTERM: {exit_text} (window {args.drain_seconds} s), exit code {run.exit_code}")
    drained = [line for line in worker_log.splitlines() if "drain" in line]
    print("worker log:", *drained[-3:], sep="\n  ")
    ok = whole == len(run.answers) and len(recorded) == len(run.answers) and run.exit_seconds is not None
    return 0 if ok and run.exit_seconds <= args.drain_seconds + 2 else 1


if __name__ == "__main__":
    sys.exit(main())
