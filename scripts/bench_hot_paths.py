"""Per-call cost of two hot paths every request takes, measured here rather than asserted in unit tests (a
shared or slow machine must not fail the suite, and a unit test must not measure time).

- `detect_language` once warm (its converters and per-character cache built): budget 200 µs a call.
- the `telemetry` pipeline node passing a request through without events: budget 50 µs a call.

Prints the median over `--repeats` runs of `--calls` calls each, in microseconds, beside the budget.

    .venv/bin/python scripts/bench_hot_paths.py [--calls 1000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rag.events import EventChannel, StreamWriter  # noqa: E402
from rag.nodes.telemetry import Telemetry  # noqa: E402
from rag.state import PipelineState  # noqa: E402
from rag.text.language import detect_language  # noqa: E402

BUDGET_LANGUAGE_US = 200.0
BUDGET_TELEMETRY_US = 50.0
QUESTION = "如何重设密码？"


def language_us(calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        detect_language(QUESTION)
    return (time.perf_counter() - started) / calls * 1e6


async def telemetry_us(calls: int) -> float:
    state = PipelineState(request_id="req-1", question=QUESTION)
    writer = StreamWriter("req-1", EventChannel(max_pending=100_000))
    node = Telemetry()
    started = time.perf_counter()
    for _ in range(calls):
        await node.run(state, writer)
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    detect_language(QUESTION)  # warm: builds the converters and the per-character cache
    language = statistics.median(language_us(args.calls) for _ in range(args.repeats))
    telemetry = statistics.median(asyncio.run(telemetry_us(args.calls)) for _ in range(args.repeats))
    print("load average: " + " ".join(f"{value:.2f}" for value in os.getloadavg()))
    print(f"detect_language (warm): {language:8.2f} µs/call  (budget {BUDGET_LANGUAGE_US:.0f})")
    print(f"telemetry node, no events: {telemetry:8.2f} µs/call  (budget {BUDGET_TELEMETRY_US:.0f})")


if __name__ == "__main__":
    main()
