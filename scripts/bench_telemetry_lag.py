#!/usr/bin/env python
"""Event-loop lag and throughput with telemetry off and on (sample rate 1.0, exporting to a local server).

Requests go through the offline pipeline: the real default workflow and nodes, with the real `StoreRetriever`
over a temporary local Qdrant index of the demo corpus (searches run in worker threads, as in production). Each
request runs like `PipelineRun`: its own task, an event channel drained by a consumer task, `telemetry.begin`
-> `graph.run(observer=...)` -> `telemetry.finish`. Loads: the closed loop (``--concurrency`` clients asking
back to back, i.e. the CPU saturated) and open-loop arrivals at ``--arrival-rates`` requests/s (at most
``--concurrency`` in flight).

A ticker task sleeps 10 ms in a loop and records how late it wakes up: the event loop's lag. "off" is the
Telemetry built without Langfuse keys; "on" samples every request and exports through the Langfuse SDK, from a
child process (the default exporter) or from a thread of this process, to a capture server in another process
(`tests/rag/telemetry/capture.py`, standing in for a remote Langfuse, so its parsing does not compete with this
process for the GIL). The three modes alternate ``--repeats`` times per load. Each run's telemetry is built and
warmed up first, outside the measured window: ``--warmup-requests`` requests through it, then a flush, so the
exporter's child process has started, exported and reached its steady state (the SDK builds its exporter's
session and encoders on first use) before timing starts. After each "on" run the exporter is shut down (flushing;
not timed) and the traces of the timed requests the server got are counted.

Also the engine's CPU per request with the observer hook (bench_engine.py's trivial-node graph): telemetry off
(observer None) against on (every request sampled, an exporter that discards).

    .venv/bin/python scripts/bench_telemetry_lag.py [--requests 3000] [--repeats 3] [--arrival-rates 0,60]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from concurrency.stats import percentile  # noqa: E402
from rag.deps import PipelineDeps  # noqa: E402
from rag.engine import CompiledGraph, compile_workflow  # noqa: E402
from rag.events import EventChannel, StreamWriter  # noqa: E402
from rag.nodes import build_registry  # noqa: E402
from rag.retrieval.embedding import LexicalEmbedder  # noqa: E402
from rag.retrieval.indexer import build_index  # noqa: E402
from rag.retrieval.markdown import load_markdown_dir  # noqa: E402
from rag.retrieval.retriever import StoreRetriever  # noqa: E402
from rag.retrieval.store import VectorStore  # noqa: E402
from rag.state import PipelineState  # noqa: E402
from rag.telemetry import FinishedTrace, ScoreRecord, Telemetry  # noqa: E402
from rag.workflows import default_workflow  # noqa: E402

TICK = 0.010
# off: no Langfuse keys; on: every request sampled, exported by the child-process exporter (the default) or the
# thread exporter (TELEMETRY_EXPORTER=thread).
MODES = ("off", "on, process", "on, thread")
QUESTIONS = (
    "如何重設密碼？",
    "How do I reset my password?",
    "我的帳號被鎖住了怎麼辦",
    "如何报名课程？",
    "How do I download my certificate?",
    "請問時數補登申請表在哪裡下載",
    "今天天氣如何",
    "What browsers are supported?",
)
HEADER = (
    "| load | telemetry | requests/s | loop lag p50 | p99 | max | CPU per request | traces exported / dropped / "
    "received |\n|---|---|---|---|---|---|---|---|"
)


@dataclass
class RunResult:
    mode: str
    arrival_rate: float  # 0: closed loop
    requests: int
    seconds: float
    cpu_seconds: float
    lags_ms: list[float]
    export: dict[str, Any]

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds

    def lag(self, p: float) -> float:
        return percentile(self.lags_ms, p)


async def _drain(channel: EventChannel) -> None:
    while True:
        event = await channel.get(30.0)
        if event["channel"] in ("meta_summary", "error"):
            return


async def one_request(graph: CompiledGraph, telemetry: Telemetry, index: int) -> None:
    request_id = uuid.uuid4().hex
    channel = EventChannel()
    writer = StreamWriter(request_id, channel)
    consumer = asyncio.create_task(_drain(channel))
    state = PipelineState(
        request_id=request_id, question=QUESTIONS[index % len(QUESTIONS)], client_id=f"anon:{index % 100}"
    )

    async def run() -> None:
        observer = telemetry.begin(state)
        try:
            await graph.run(state, writer, observer=observer)
        finally:
            telemetry.finish(state)

    await asyncio.create_task(run())
    writer.finish({"intent": state.intent, "trace_id": state.trace_id})
    await consumer


async def load(
    graph: CompiledGraph, telemetry: Telemetry, *, concurrency: int, total: int, arrival_rate: float = 0.0
) -> tuple[float, float, list[float]]:
    """Run `total` requests, at most `concurrency` at a time: back to back (closed loop) when `arrival_rate` is 0,
    else one every 1/arrival_rate s (open loop). Returns (seconds, CPU seconds, sorted lags in ms)."""
    lags: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(TICK)
            lags.append((time.perf_counter() - before - TICK) * 1000)

    tick_task = asyncio.create_task(ticker())
    await asyncio.sleep(TICK * 3)
    started, cpu_started = time.perf_counter(), time.process_time()
    if arrival_rate <= 0:
        numbers = itertools.count()

        async def client() -> None:
            while (index := next(numbers)) < total:
                await one_request(graph, telemetry, index)

        await asyncio.gather(*(client() for _ in range(concurrency)))
    else:
        slots = asyncio.Semaphore(concurrency)

        async def arrive(index: int) -> None:
            async with slots:
                await one_request(graph, telemetry, index)

        arrivals = []
        for index in range(total):
            arrivals.append(asyncio.create_task(arrive(index)))
            await asyncio.sleep(max(0.0, started + (index + 1) / arrival_rate - time.perf_counter()))
        await asyncio.gather(*arrivals)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    stop.set()
    await tick_task
    return seconds, cpu, sorted(lags)


def run_mode(
    graph: CompiledGraph, mode: str, args: argparse.Namespace, capture_url: str, arrival_rate: float
) -> RunResult:
    if mode == "off":
        telemetry = Telemetry(sample_rate=1.0)
    else:
        from rag.telemetry.langfuse_export import LangfuseExporter
        from rag.telemetry.process_export import LangfuseProcessExporter

        exporter_class = LangfuseProcessExporter if mode == "on, process" else LangfuseExporter
        exporter = exporter_class(
            public_key=f"pk-lf-bench-{uuid.uuid4().hex[:8]}",
            secret_key="sk-lf-bench",
            host=capture_url,
            queue_size=args.queue_size,
        )
        telemetry = Telemetry(sample_rate=1.0, exporter=exporter)
    # Warm-up, not timed: a cold exporter would do its first-use work inside the measured window.
    asyncio.run(load(graph, telemetry, concurrency=args.concurrency, total=args.warmup_requests))
    if not telemetry.flush(60):
        raise RuntimeError(f"{mode}: the warm-up's traces were not exported within 60 s")
    counted = ("exported_traces", "dropped")
    warm = {key: telemetry.stats()["export"][key] for key in counted} if telemetry.enabled else {}
    before = _server_stats(capture_url)
    seconds, cpu, lags = asyncio.run(
        load(graph, telemetry, concurrency=args.concurrency, total=args.requests, arrival_rate=arrival_rate)
    )
    export: dict[str, Any] = {}
    if telemetry.enabled:
        telemetry.shutdown(60)
        stats = telemetry.stats()["export"]
        export = {key: stats[key] - warm[key] for key in counted}
        after = _server_stats(capture_url)
        export["traces_received"] = after["traces"] - before["traces"]
        export["complete_received"] = after["complete_traces"] - before["complete_traces"]
    return RunResult(mode, arrival_rate, args.requests, seconds, cpu, lags, export)


def _server_stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(f"{url}/stats", timeout=10) as response:
        return json.loads(response.read())


# --- the observer hook's CPU cost (engine-only graph) ------------------------------------------------------------


class _DiscardingExporter:
    def submit_trace(self, trace: FinishedTrace) -> bool:
        return True

    def submit_score(self, score: ScoreRecord, *, trace: FinishedTrace | None) -> bool:
        return True

    def stats(self) -> dict[str, int]:
        return {}

    def flush(self, timeout: float = 0) -> bool:
        return True

    def shutdown(self, timeout: float = 0) -> None:
        pass


def hook_cost(requests: int, repeats: int) -> dict[str, list[float]]:
    """CPU µs per request of the trivial-node graph: telemetry off, and on (sampled, nothing exported)."""
    from scripts.bench_engine import trivial_registry

    deps = PipelineDeps(retriever=None)  # type: ignore[arg-type]  # trivial nodes never search
    graph = compile_workflow(default_workflow(), registry=trivial_registry(), deps=deps)
    variants = {
        "telemetry off (observer=None)": Telemetry(),
        "telemetry on, every request sampled": Telemetry(sample_rate=1.0, exporter=_DiscardingExporter()),
    }

    async def run(telemetry: Telemetry) -> float:
        started = time.process_time()
        for i in range(requests):
            channel = EventChannel()
            writer = StreamWriter(f"r{i}", channel)
            consumer = asyncio.create_task(_drain(channel))
            state = PipelineState(request_id=f"r{i}", question=QUESTIONS[i % len(QUESTIONS)], client_id="bench")

            async def one(state: PipelineState = state, writer: StreamWriter = writer) -> None:
                observer = telemetry.begin(state)
                await graph.run(state, writer, observer=observer)
                telemetry.finish(state)

            await asyncio.create_task(one())
            writer.finish({})
            await consumer
        return (time.process_time() - started) / requests * 1e6

    results: dict[str, list[float]] = {name: [] for name in variants}
    asyncio.run(run(variants["telemetry off (observer=None)"]))  # warm-up
    for _ in range(repeats):
        for name, telemetry in variants.items():
            results[name].append(asyncio.run(run(telemetry)))
    return results


# --- report ------------------------------------------------------------------------------------------------------


def _load_name(rate: float, concurrency: int) -> str:
    return f"closed loop, {concurrency} clients" if rate <= 0 else f"{rate:g} req/s, at most {concurrency} at once"


def _row(load_name: str, mode: str, runs: list[RunResult]) -> str:
    def median(values: Any) -> float:
        return statistics.median(list(values))

    exported = "-"
    if runs[0].export:
        exported = (
            f"{sum(r.export['exported_traces'] for r in runs)} / {sum(r.export['dropped'] for r in runs)}"
            f" / {sum(r.export['traces_received'] for r in runs)}"
            f" ({sum(r.export['complete_received'] for r in runs)} complete)"
        )
    return (
        f"| {load_name} | {mode} | {median(r.throughput for r in runs):.0f}"
        f" | {median(r.lag(50) for r in runs):.2f} ms | {median(r.lag(99) for r in runs):.2f} ms"
        f" | {median(r.lags_ms[-1] for r in runs):.2f} ms"
        f" | {median(r.cpu_seconds / r.requests * 1000 for r in runs):.2f} ms | {exported} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--requests", type=int, default=3000, help="requests per run")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the three modes per load")
    parser.add_argument("--queue-size", type=int, default=1000, help="TELEMETRY_QUEUE_SIZE of the 'on' runs")
    parser.add_argument(
        "--arrival-rates", default="0,60", help="comma-separated requests/s of open-loop loads; 0 is the closed loop"
    )
    parser.add_argument(
        "--warmup-requests", type=int, default=200, help="untimed requests through each run's telemetry first"
    )
    parser.add_argument("--hook-requests", type=int, default=10000)
    args = parser.parse_args()
    rates = [float(rate) for rate in args.arrival_rates.split(",")]

    with tempfile.TemporaryDirectory(prefix="bench-telemetry-") as folder:
        store = VectorStore.open("bench", path=Path(folder) / "qdrant")
        report = build_index(load_markdown_dir(ROOT / "rag" / "corpus" / "demo"), store, LexicalEmbedder())
        retriever = StoreRetriever(store, LexicalEmbedder())
        graph = compile_workflow(default_workflow(), registry=build_registry(), deps=PipelineDeps(retriever=retriever))
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.rag.telemetry.capture"], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        try:
            capture_url = (server.stdout.readline() if server.stdout else "").strip()
            asyncio.run(load(graph, Telemetry(), concurrency=args.concurrency, total=300))  # warm-up
            results = [
                run_mode(graph, mode, args, capture_url, rate)
                for rate in rates
                for _ in range(args.repeats)
                for mode in MODES
            ]
        finally:
            server.terminate()
            server.wait(10)
            retriever.close()
    hooks = hook_cost(args.hook_requests, args.repeats)

    print(f"machine: {platform.platform()}; {platform.processor() or platform.machine()}; cpus={os.cpu_count()}")
    print(f"python: {platform.python_implementation()} {platform.python_version()}")
    print(
        f"command: .venv/bin/python scripts/bench_telemetry_lag.py --concurrency {args.concurrency} "
        f"--requests {args.requests} --repeats {args.repeats} --queue-size {args.queue_size} "
        f"--arrival-rates {args.arrival_rates} --warmup-requests {args.warmup_requests} "
        f"--hook-requests {args.hook_requests}"
    )
    print(f"index: {report.documents} documents, {report.chunks} chunks (temporary local Qdrant store)")
    print()
    print("Every run:")
    print()
    print(HEADER)
    for result in results:
        print(_row(_load_name(result.arrival_rate, args.concurrency), result.mode, [result]))
    print()
    print("Median of the runs of each load (exports summed):")
    print()
    print(HEADER)
    for rate in rates:
        for mode in MODES:
            runs = [r for r in results if r.mode == mode and r.arrival_rate == rate]
            print(_row(_load_name(rate, args.concurrency), mode, runs))
    print()
    print("| engine-only graph (trivial nodes) | median CPU per request | all repeats (µs) |")
    print("|---|---|---|")
    for name, values in hooks.items():
        print(f"| {name} | {statistics.median(values):.1f} µs | {', '.join(f'{v:.1f}' for v in values)} |")


if __name__ == "__main__":
    main()
