"""A daphne worker that answers through the LLM simulator, for end-to-end tests and scripts of long answers.

`answer_worker_env` prepares what a worker needs (a data folder, a migrated and indexed database, the
simulator's URL, Redis when given) and yields the environment to start `tests.daphne_workers.Worker`s with.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from devtools.simulator.testing import SimulatorProcess
from tests.daphne_workers import Worker, manage, worker_env
from tests.llm_simulator import simulator_view
from tests.stream_clients import Answer, asse_ask, ws_ask
from tests.waiting import until, until_async


@contextlib.contextmanager
def llm_simulator(
    *, tpot_ms: float, output_tokens: int, max_num_seqs: int = 64, shared: SimulatorProcess | None = None
) -> Iterator[SimulatorProcess]:
    """The simulator streaming `output_tokens` tokens `tpot_ms` apart, whatever the batch (no slowdown): `shared` (a
    test's `suite_simulator`) configured so, else a process of its own (the scripts')."""
    flags: dict[str, Any] = {
        "tpot_ms": tpot_ms,
        "ttft_ms": 20,
        "output_tokens": output_tokens,
        "max_num_seqs": max_num_seqs,
        "batch_slowdown": 0,
    }
    if shared is not None:
        yield simulator_view(shared, flags)
        return
    simulator = SimulatorProcess().start(**flags)
    try:
        yield simulator
    finally:
        simulator.stop()


@contextlib.contextmanager
def answer_worker_env(
    llm_base_url: str, *, redis_url: str = "", label: str = "answers", **extra: str
) -> Iterator[dict[str, str]]:
    """The environment of workers that answer through `llm_base_url` (`tests.daphne_workers.worker_env`, migrated
    and indexed), without the semantic cache, telemetry or a network embedder, and with room for 64 answers."""
    answers: dict[str, Any] = {
        "EMBEDDING_BASE_URL": "",
        "LANGFUSE_PUBLIC_KEY": "",
        "LANGFUSE_SECRET_KEY": "",
        "RAG_SEMANTIC_CACHE_ENABLED": "false",
        "LLM_MAX_CONCURRENT_CHAT": "64",
        "LLM_MAX_CONCURRENT_RESPONSES": "64",
    }
    with worker_env(label, llm_base_url=llm_base_url, redis_url=redis_url, **(answers | extra)) as env:
        yield env


# --- streams through a SIGTERM -----------------------------------------------------------------------------------


@dataclass
class SigtermRun:
    """What the clients of a worker saw when it got SIGTERM with answers streaming."""

    answers: list[Answer]  # the live streams: SSE ones first, then WebSocket ones
    refused_sse: Answer  # a new SSE ask sent after the signal
    refused_ws: Answer  # a new WebSocket ask sent after the signal
    exit_seconds: float | None  # from the signal to the process's end (None: still running)
    exit_code: int | None


def _refusal_failed(exc: BaseException) -> Answer:
    # The worker may be gone already (the drain had nothing left to wait for): the proxy's next try goes elsewhere.
    return Answer(status=0, error=repr(exc))


async def streams_through_sigterm(
    worker: Worker, *, sse: int, ws: int, question: str, exit_within: float, read_seconds: float = 120.0
) -> SigtermRun:
    """Start `sse` + `ws` answers, send SIGTERM once each has streamed part of its answer, ask once more over each
    transport, and collect everything until the streams end and the process exits (or `exit_within` passes)."""
    total = sse + ws
    streaming: set[int] = set()
    all_streaming = asyncio.Event()

    def watcher(index: int) -> Callable[[dict[str, Any]], None]:
        def on_event(event: dict[str, Any]) -> None:
            if event.get("channel") == "answer":
                streaming.add(index)
                if len(streaming) == total:
                    all_streaming.set()

        return on_event

    tasks = [
        asyncio.ensure_future(
            asse_ask(worker.url, question, read_seconds=read_seconds, on_event=watcher(i))
            if i < sse
            else ws_ask(worker.url, question, within=read_seconds, linger=exit_within, on_event=watcher(i))
        )
        for i in range(total)
    ]
    try:
        async with asyncio.timeout(read_seconds):
            await all_streaming.wait()
    except TimeoutError:
        for task in tasks:
            task.cancel()
        started = len(streaming)
        raise AssertionError(f"only {started} of {total} answers started streaming:\n{worker.output()}") from None
    signalled = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)
    exited = asyncio.ensure_future(_exit_time(worker, signalled, exit_within))
    await until_async(lambda: _draining(worker), within=10.0)  # its loop takes the signal between two steps
    try:
        refused_sse = await asse_ask(worker.url, question, read_seconds=10)
    except Exception as exc:
        refused_sse = _refusal_failed(exc)
    refused_ws = await ws_ask(worker.url, question, within=10)
    answers = list(await asyncio.gather(*tasks))
    exit_seconds = await exited
    return SigtermRun(answers, refused_sse, refused_ws, exit_seconds, worker.process.poll())


async def _draining(worker: Worker) -> bool:
    """Whether the worker says it drains (its readiness fails on `lifecycle`), or has stopped answering at all."""
    try:
        async with httpx.AsyncClient(base_url=worker.url, timeout=5.0) as client:
            response = await client.get("/api/v1/ready")
    except httpx.TransportError:
        return worker.process.poll() is not None
    return response.status_code == 503 and response.json()["checks"]["lifecycle"]["ok"] is False


async def _exit_time(worker: Worker, signalled: float, within: float) -> float | None:
    try:
        await until(lambda: worker.process.poll() is not None, within=signalled + within - time.monotonic())
    except AssertionError:
        return None
    return time.monotonic() - signalled


def recorded_exchanges(env: dict[str, str], request_ids: list[str]) -> dict[str, str]:
    """The recorded answers among `request_ids`, read from the workers' database: request id -> status/code."""
    code = (
        "import json, sys; from chatbot.models import Message; "
        f"rows = Message.objects.filter(role='assistant', request_id__in={request_ids!r}); "
        "print(json.dumps({m.request_id: f'{m.status}/{m.error_code}' for m in rows}))"
    )
    output = manage(env, "shell", "-c", code)
    return dict(json.loads(output.strip().splitlines()[-1]))
