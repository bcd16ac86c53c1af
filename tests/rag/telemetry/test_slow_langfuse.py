"""Nothing on the request path waits on Langfuse, with the default (child-process) exporter: a Langfuse that
holds every export without answering neither slows the requests nor stalls the event loop. The exporter backs
up and drops (and counts) traces instead."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Iterator

import pytest

from rag.telemetry import Telemetry
from rag.telemetry.process_export import LangfuseProcessExporter
from tests.rag.telemetry.capture import CaptureServer
from tests.rag.telemetry.support import compile_default, run_request

# Langfuse holds each export this long; the SDK gives up on one after EXPORT_TIMEOUT. A request that waited on
# either would take seconds; the offline pipeline answers in milliseconds.
REPLY_DELAY = 30.0
EXPORT_TIMEOUT = 10
ROUNDS, CONCURRENT = 6, 8
TICK = 0.01


@pytest.fixture
def hanging_langfuse() -> Iterator[CaptureServer]:
    with CaptureServer(reply_delay=REPLY_DELAY) as server:
        yield server


async def timed_batch(telemetry: Telemetry, graph: object, label: str) -> list[float]:
    async def one(index: int) -> float:
        started = time.perf_counter()
        await run_request(telemetry, request_id=f"{label}-{uuid.uuid4().hex}", graph=graph)
        return time.perf_counter() - started

    return list(await asyncio.gather(*(one(i) for i in range(CONCURRENT))))


async def test_a_langfuse_that_never_answers_does_not_slow_requests_or_stall_the_loop(
    hanging_langfuse: CaptureServer,
) -> None:
    exporter = await asyncio.to_thread(
        LangfuseProcessExporter,
        public_key=f"pk-lf-hang-{uuid.uuid4().hex[:8]}",
        secret_key="sk-lf-hang",
        host=hanging_langfuse.url,
        flush_at=2,  # the child exports (and so waits on the server) after every trace
        timeout=EXPORT_TIMEOUT,
        queue_size=4,
    )
    on = Telemetry(sample_rate=1.0, exporter=exporter)
    off = Telemetry(sample_rate=1.0)  # no keys: what a server without Langfuse does
    graph = compile_default()
    await timed_batch(off, graph, "warm-up")

    lags: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            before = time.perf_counter()
            await asyncio.sleep(TICK)
            lags.append(time.perf_counter() - before - TICK)

    ticking = asyncio.create_task(ticker())
    latencies: dict[str, list[float]] = {"off": [], "on": []}
    try:
        # Alternated, so a machine busy with something else weighs on both alike.
        for _ in range(ROUNDS):
            latencies["off"] += await timed_batch(off, graph, "off")
            latencies["on"] += await timed_batch(on, graph, "on")
    finally:
        stop.set()
        await ticking

    try:
        export = on.stats()["export"]
        # The exporter really was stuck: its queue filled up and it dropped traces rather than make anyone wait.
        assert export["dropped"] > 0, export
        assert hanging_langfuse.requests == 0  # nothing was ever answered
        median_off, median_on = statistics.median(latencies["off"]), statistics.median(latencies["on"])
        assert median_on <= 2 * median_off + 0.02, (median_off, median_on)
        assert max(latencies["on"]) < 1.0, max(latencies["on"])
        assert max(lags) < 1.0, max(lags)
    finally:
        started = time.perf_counter()
        await asyncio.to_thread(on.shutdown, 2)
        # Shutting down gives up on what the server never took, within its own timeout (plus killing the child).
        assert time.perf_counter() - started < 10
