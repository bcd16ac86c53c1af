#!/usr/bin/env python
"""FIFO against priority ordering of LLM calls, on the vLLM-like simulator at 90 % of capacity.

Each request makes THREE sequential streaming chat calls, each under ``manager.acquire("chat")`` inside a
``request_scope`` (so priority mode sees how many calls a request has completed). The manager's limit equals the
simulator's ``--max-num-seqs``, so requests queue in the manager, as in production. Steps:

1. measure the service time of one call with the batch full (N closed-loop callers) -> capacity;
2. draw one open-loop Poisson arrival sequence (fixed seed) at ``--load`` x capacity for ``--duration`` s;
3. replay that same sequence under FIFO, then under priority (starvation threshold ``--starvation``);
4. print and write ``docs/benchmarks/fifo_vs_priority.md`` and ``.svg`` (CDFs; stdlib-only SVG).

    .venv/bin/python scripts/bench_fifo_priority.py [--max-num-seqs 8] [--duration 75] [--load 0.9] [--seed 7]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import random
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

PROJECT_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_DIR))

import openai  # noqa: E402
from openai.types.chat import ChatCompletionMessageParam  # noqa: E402

from concurrency.context import request_scope  # noqa: E402
from concurrency.manager import LLMConcurrencyManager  # noqa: E402
from concurrency.stats import percentile  # noqa: E402
from devtools.simulator.testing import SimulatorProcess  # noqa: E402

CALLS_PER_REQUEST = 3
OUT_DIR = PROJECT_DIR / "docs" / "benchmarks"
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "How do I reset my password?"}]


@dataclass
class RequestResult:
    arrival: float  # seconds after the run's start (scheduled)
    e2e: float = math.nan  # arrival -> last token of the third call
    ttft: float = math.nan  # arrival -> first answer token of the third call
    waits: list[float] = field(default_factory=list)  # permit wait of each call
    error: str = ""


@dataclass
class RunResult:
    mode: str
    requests: list[RequestResult]
    utilisation: float  # mean in_progress / limit, sampled during the arrival window
    wall: float

    @property
    def done(self) -> list[RequestResult]:
        return [r for r in self.requests if not r.error]


async def one_call(client: openai.AsyncOpenAI, model: str, on_first_token: object = None) -> None:
    stream = await client.chat.completions.create(model=model, messages=MESSAGES, stream=True)
    first = True
    async for chunk in stream:
        if first and chunk.choices and chunk.choices[0].delta.content:
            first = False
            if callable(on_first_token):
                on_first_token()


async def one_request(
    rid: str, start: float, result: RequestResult, manager: LLMConcurrencyManager, client: openai.AsyncOpenAI
) -> None:
    loop = asyncio.get_running_loop()
    arrived = start + result.arrival

    def first_answer_token() -> None:
        result.ttft = loop.time() - arrived

    try:
        with request_scope(rid):
            for call in range(CALLS_PER_REQUEST):
                async with manager.acquire("chat") as permit:
                    result.waits.append(permit.waited_s)
                    last = call == CALLS_PER_REQUEST - 1
                    await one_call(client, "sim-llm", first_answer_token if last else None)
        result.e2e = loop.time() - arrived
    except Exception as exc:  # recorded and reported, never hidden
        result.error = f"{type(exc).__name__}: {exc}"


async def measure_service_time(base_url: str, n: int, seconds: float) -> float:
    """Mean duration of one call with ``n`` callers back to back (the batch kept full)."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    durations: list[float] = []
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + seconds

    async def caller() -> None:
        while loop.time() < stop_at:
            began = loop.time()
            await one_call(client, "sim-llm")
            durations.append(loop.time() - began)

    await asyncio.gather(*(caller() for _ in range(n)))
    await client.close()
    durations = durations[n:]  # the first wave ramps the batch up
    return statistics.fmean(durations)


async def run_mode(mode: str, arrivals: list[float], base_url: str, args: argparse.Namespace) -> RunResult:
    manager = LLMConcurrencyManager(
        {"chat": args.max_num_seqs},
        priority_enabled=mode == "priority",
        starvation_threshold=args.starvation,
        acquire_timeout=600.0,  # nobody gives up: the comparison is of waiting, not of shedding
        max_waiters=1_000_000,
    )
    client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=600.0)
    loop = asyncio.get_running_loop()
    results = [RequestResult(arrival=a) for a in arrivals]
    samples: list[float] = []
    start = loop.time() + 0.2
    tasks: list[asyncio.Task[None]] = []

    async def sampler() -> None:
        while True:
            await asyncio.sleep(0.25)
            if loop.time() - start <= args.duration:
                samples.append(manager.stats(queue_head=0)["backends"]["chat"]["in_progress"] / args.max_num_seqs)

    sampling = asyncio.create_task(sampler())
    for i, result in enumerate(results):
        delay = start + result.arrival - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one_request(f"{mode}-{i}", start, result, manager, client)))
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=args.duration * 4 + 60)
    sampling.cancel()
    await client.close()
    return RunResult(mode, results, statistics.fmean(samples) if samples else 0.0, loop.time() - start)


def poisson_arrivals(rate: float, duration: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    t = 0.0
    out: list[float] = []
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            return out
        out.append(t)


# ------------------------------------------------------------------------------------------------ report


def row_stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "mean": statistics.fmean(ordered),
        "p50": percentile(ordered, 50),
        "p95": percentile(ordered, 95),
        "p99": percentile(ordered, 99),
        "max": ordered[-1],
    }


class Summary(TypedDict):
    n: int
    errors: int
    e2e: dict[str, float]
    ttft: dict[str, float]
    max_wait: float
    mean_wait_by_call: list[float]
    total_wait: dict[str, float]
    utilisation: float


def summarise(run: RunResult) -> Summary:
    done = run.done
    waits_by_call = [[r.waits[i] for r in done] for i in range(CALLS_PER_REQUEST)]
    return {
        "n": len(done),
        "errors": len(run.requests) - len(done),
        "e2e": row_stats([r.e2e for r in done]),
        "ttft": row_stats([r.ttft for r in done]),
        "max_wait": max(max(r.waits) for r in done),
        "mean_wait_by_call": [statistics.fmean(w) for w in waits_by_call],
        "total_wait": row_stats([sum(r.waits) for r in done]),
        "utilisation": run.utilisation,
    }


def svg_cdfs(runs: dict[str, list[RequestResult]], path: Path) -> None:
    """Two panels of empirical CDFs (end-to-end latency, time to first answer token), stdlib only."""
    colours = {"fifo": "#1f77b4", "priority": "#d62728"}
    width, height, pad_l, pad_r, pad_t, pad_b, gap = 900, 360, 60, 20, 40, 50, 60
    panel_w = (width - pad_l - pad_r - gap) / 2
    panel_h = height - pad_t - pad_b
    metrics = [("e2e", "End-to-end latency (s)"), ("ttft", "Time to first answer token (s)")]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for index, (metric, title) in enumerate(metrics):
        x0 = pad_l + index * (panel_w + gap)
        values = {mode: sorted(getattr(r, metric) for r in results) for mode, results in runs.items()}
        x_max = max(v[-1] for v in values.values()) * 1.05
        step = _nice_step(x_max / 6)
        sx = lambda v, x0=x0, x_max=x_max: x0 + v / x_max * panel_w  # noqa: E731
        sy = lambda p: pad_t + (1 - p) * panel_h  # noqa: E731
        parts.append(
            f'<text x="{x0 + panel_w / 2}" y="{pad_t - 15}" text-anchor="middle" font-weight="bold">{title}: CDF</text>'
        )
        tick = 0.0
        while tick <= x_max:
            parts.append(
                f'<line x1="{sx(tick):.1f}" y1="{pad_t}" x2="{sx(tick):.1f}" y2="{pad_t + panel_h}" stroke="#eee"/>'
            )
            parts.append(f'<text x="{sx(tick):.1f}" y="{pad_t + panel_h + 16}" text-anchor="middle">{tick:g}</text>')
            tick += step
        for p in (0, 0.25, 0.5, 0.75, 0.95, 1.0):
            parts.append(f'<line x1="{x0}" y1="{sy(p):.1f}" x2="{x0 + panel_w}" y2="{sy(p):.1f}" stroke="#eee"/>')
            parts.append(f'<text x="{x0 - 6}" y="{sy(p) + 4:.1f}" text-anchor="end">{p:g}</text>')
        parts.append(f'<rect x="{x0}" y="{pad_t}" width="{panel_w}" height="{panel_h}" fill="none" stroke="#999"/>')
        parts.append(f'<text x="{x0 + panel_w / 2}" y="{height - 12}" text-anchor="middle">seconds</text>')
        for mode, vals in values.items():
            n = len(vals)
            points = [f"{sx(0):.1f},{sy(0):.1f}"]
            for i, v in enumerate(vals):
                points.append(f"{sx(v):.1f},{sy(i / n):.1f}")
                points.append(f"{sx(v):.1f},{sy((i + 1) / n):.1f}")
            parts.append(
                f'<polyline fill="none" stroke="{colours[mode]}" stroke-width="2" points="{" ".join(points)}"/>'
            )
    for i, (mode, colour) in enumerate(colours.items()):
        x = pad_l + 12 + i * 110
        parts.append(
            f'<line x1="{x}" y1="{pad_t + 14}" x2="{x + 22}" y2="{pad_t + 14}" stroke="{colour}" stroke-width="3"/>'
        )
        parts.append(f'<text x="{x + 28}" y="{pad_t + 18}">{mode}</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def _nice_step(raw: float) -> float:
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)


def fmt_row(label: str, stats: dict[str, float]) -> str:
    return f"| {label} | {stats['mean']:.2f} | {stats['p50']:.2f} | {stats['p95']:.2f} | {stats['p99']:.2f} |"


def markdown(args: argparse.Namespace, facts: dict[str, object], results: dict[str, Summary]) -> str:
    fifo, prio = results["fifo"], results["priority"]
    command = "python scripts/bench_fifo_priority.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines = [
        "# FIFO vs priority ordering of LLM calls at 90 % load",
        "",
        f"Command: `{command.strip()}`  ",
        f"Machine: `{platform.platform()}`, {os.cpu_count()} CPUs, Python {platform.python_version()}  ",
        f"Simulator: `simulate_llm --max-num-seqs {args.max_num_seqs} --ttft-ms {args.ttft_ms} --tpot-ms "
        f"{args.tpot_ms} --output-tokens {args.output_tokens}` (batch slowdown 1.0); manager limit "
        f"{args.max_num_seqs}; starvation threshold {args.starvation} s.  ",
        f"Measured service time of one call with the batch full: {facts['service_time']:.3f} s, so capacity = "
        f"{args.max_num_seqs} / ({CALLS_PER_REQUEST} x {facts['service_time']:.3f} s) = {facts['capacity']:.2f} "
        f"requests/s. Arrivals: Poisson at {args.load:.0%} of that = {facts['rate']:.2f} requests/s for "
        f"{args.duration:g} s (seed {args.seed}): {facts['arrivals']} requests, the same sequence in both modes. "
        f'Each request: {CALLS_PER_REQUEST} sequential streaming chat calls through `manager.acquire("chat")` '
        "inside `request_scope`.",
        "",
        "| seconds | mean | p50 | p95 | p99 |",
        "| --- | ---: | ---: | ---: | ---: |",
        fmt_row("end-to-end, FIFO", fifo["e2e"]),
        fmt_row("end-to-end, priority", prio["e2e"]),
        fmt_row("first answer token, FIFO", fifo["ttft"]),
        fmt_row("first answer token, priority", prio["ttft"]),
        fmt_row("slot wait per request (sum of 3), FIFO", fifo["total_wait"]),
        fmt_row("slot wait per request (sum of 3), priority", prio["total_wait"]),
        "",
        "| | FIFO | priority |",
        "| --- | ---: | ---: |",
        f"| longest wait for a slot (s) | {fifo['max_wait']:.2f} | {prio['max_wait']:.2f} |",
        "| mean wait of call 1 / 2 / 3 (s) | "
        + " / ".join(f"{w:.2f}" for w in fifo["mean_wait_by_call"])
        + " | "
        + " / ".join(f"{w:.2f}" for w in prio["mean_wait_by_call"])
        + " |",
        f"| requests completed (errors) | {fifo['n']} ({fifo['errors']}) | {prio['n']} ({prio['errors']}) |",
        f"| mean slot utilisation while arriving | {fifo['utilisation']:.0%} | {prio['utilisation']:.0%} |",
        "",
        "![CDFs of end-to-end latency and time to first answer token](fifo_vs_priority.svg)",
        "",
    ]
    return "\n".join(lines)


START, END = "<!-- results: written by scripts/bench_fifo_priority.py -->", "<!-- end of results -->"


def write_results(path: Path, text: str) -> None:
    """Replace the results block of ``path``, keeping the hand-written analysis around it."""
    block = f"{START}\n{text.rstrip()}\n{END}"
    if path.exists() and START in (old := path.read_text()) and END in old:
        before, rest = old.split(START, 1)
        path.write_text(before + block + rest.split(END, 1)[1])
    else:
        path.write_text(block + "\n\n## What it shows\n\n(to be written)\n")


async def main(args: argparse.Namespace) -> dict[str, object]:
    os.environ.setdefault("DATA_DIR", tempfile.mkdtemp(prefix="bench-fifo-priority-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbot.settings")
    sim = SimulatorProcess().start(
        max_num_seqs=args.max_num_seqs, ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms, output_tokens=args.output_tokens
    )
    try:
        print(f"simulator at {sim.base_url}; measuring the service time ({args.measure:g} s) ...", flush=True)
        service = await measure_service_time(sim.base_url, args.max_num_seqs, args.measure)
        capacity = args.max_num_seqs / (CALLS_PER_REQUEST * service)
        rate = args.load * capacity
        arrivals = poisson_arrivals(rate, args.duration, args.seed)
        print(
            f"service time {service:.3f} s/call -> capacity {capacity:.2f} req/s; "
            f"{len(arrivals)} arrivals at {rate:.2f} req/s over {args.duration:g} s",
            flush=True,
        )
        runs: dict[str, RunResult] = {}
        for mode in ("fifo", "priority"):
            await sim.areset()
            await asyncio.sleep(1.0)
            began = time.monotonic()
            runs[mode] = await run_mode(mode, arrivals, sim.base_url, args)
            print(f"{mode}: done in {time.monotonic() - began:.0f} s", flush=True)
    finally:
        sim.stop()
    results = {mode: summarise(run) for mode, run in runs.items()}
    facts = {"service_time": service, "capacity": capacity, "rate": rate, "arrivals": len(arrivals)}
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    text = markdown(args, facts, results)
    if args.write:
        svg_cdfs({mode: run.done for mode, run in runs.items()}, OUT_DIR / "fifo_vs_priority.svg")
        write_results(OUT_DIR / "fifo_vs_priority.md", text)
        print(f"wrote {OUT_DIR / 'fifo_vs_priority.md'} and fifo_vs_priority.svg")
    print(text)
    return {"facts": facts, "results": results}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-num-seqs", type=int, default=8, help="simulator batch size = manager limit")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--tpot-ms", type=float, default=20.0)
    parser.add_argument("--output-tokens", type=int, default=24)
    parser.add_argument("--duration", type=float, default=75.0, help="seconds of arrivals per mode")
    parser.add_argument("--load", type=float, default=0.9, help="arrival rate as a share of capacity")
    parser.add_argument("--starvation", type=float, default=5.0, help="priority mode's starvation threshold (s)")
    parser.add_argument("--measure", type=float, default=8.0, help="seconds spent measuring the service time")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-write", dest="write", action="store_false", help="print only")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
