"""CPU per `LLMBackend.complete()` call: the planner's kind of call (a structured, JSON-schema completion).

Starts the LLM simulator (a free port, or `--port`), then per API (chat completions, responses) makes `--calls`
sequential completions with the planner's output model, timing each with `time.process_time()` (this process's
CPU: request building, the HTTP exchange's client side, reading and parsing the reply; the simulator is another
process; the per-attempt log line is silenced). Prints the median CPU per call over `--repeats` repeats,
in milliseconds, and the load average.

    .venv/bin/python scripts/bench_complete.py [--calls 200] [--repeats 3] [--port 21950]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbot.settings")

from concurrency.manager import LLMConcurrencyManager, set_manager  # noqa: E402
from devtools.simulator.testing import SimulatorProcess  # noqa: E402
from rag.llm import CallPolicyConfig, LLMBackend, LLMConfig  # noqa: E402
from rag.llm.backends import ChatBackend  # noqa: E402
from rag.llm.client import aclose_clients  # noqa: E402
from rag.nodes.planner import PlanOutput  # noqa: E402

SIM_FLAGS = {"ttft_ms": 1, "tpot_ms": 0, "output_tokens": 24, "max_num_seqs": 4}
MESSAGES = [
    {"role": "system", "content": "Plan how to answer the user's question. Reply with JSON only."},
    {"role": "user", "content": "How do I download the leave application form?"},
]


def start_simulator(port: int | None) -> SimulatorProcess:
    sim = SimulatorProcess()
    if port is None:
        return sim.start(**SIM_FLAGS)
    sim.port, sim.flags = port, dict(SIM_FLAGS)
    sim._spawn(sim.flags)
    if not sim._wait_healthy():
        output = sim.output()
        sim.stop()
        raise SystemExit(f"the simulator did not start on port {port}:\n{output}")
    return sim


async def cpu_ms_per_call(base_url: str, api: ChatBackend, calls: int) -> float:
    """Median CPU milliseconds of one `complete()` over `calls` sequential calls (after two warm-up calls)."""
    set_manager(LLMConcurrencyManager({"default": 4, "chat": 4, "responses": 4}, acquire_timeout=5.0))
    config = LLMConfig(base_url=base_url, api_key="bench", chat_model="sim-chat", total_timeout=20.0)
    backend = LLMBackend(config, CallPolicyConfig())
    samples: list[float] = []
    try:
        for index in range(calls + 2):
            started = time.process_time()
            result = await backend.complete(backend=api, node="planner", messages=MESSAGES, output=PlanOutput)
            spent = time.process_time() - started
            if result.parsed is None:
                raise SystemExit("the simulator's reply did not parse")
            if index >= 2:
                samples.append(spent * 1000)
    finally:
        await aclose_clients()
        set_manager(None)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--port", type=int, default=None, help="the simulator's port (default: a free one)")
    args = parser.parse_args()
    import django

    django.setup()
    logging.getLogger("rag.llm").setLevel(logging.WARNING)  # one attempt line per call would be measured too
    sim = start_simulator(args.port)
    try:
        for api in ("chat", "responses"):
            runs = [asyncio.run(cpu_ms_per_call(sim.base_url, api, args.calls)) for _ in range(args.repeats)]
            figures = ", ".join(f"{value:.2f}" for value in runs)
            print(f"{api}: {statistics.median(runs):.2f} ms CPU per complete() (repeats: {figures})")
    finally:
        sim.stop()
    print("load average: " + " ".join(f"{value:.2f}" for value in os.getloadavg()))


if __name__ == "__main__":
    main()
