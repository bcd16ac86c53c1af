"""Drive simulated users at a running deployment over SSE or WebSocket, and time every answer.

Closed loop (`users` users, each asking again as soon as its answer ends) or open loop (`rate` new asks per
second, whatever the answers do, at most `max_in_flight` at once). Every question is distinct (a numbered suffix)
so the semantic cache does not serve it, unless `cached` is set. Every wait is bounded (`answer_timeout`): an
answer that does not end in time counts as a `client_timeout` error. With `metrics_url` (the simulator's or
vLLM's `/metrics`) the LLM server's running and waiting requests are sampled every half second.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

__all__ = ["AnswerResult", "LoadConfig", "MetricSample", "Run", "run_load"]

DEFAULT_QUESTIONS = (
    "如何重設密碼？",
    "How do I download my certificate?",
    "學習時數如何計算？",
    "How do I change the email address on my account?",
    "課程證書要怎麼下載？",
    "What should I do if a video will not play?",
)
TERMINALS = ("meta_summary", "error")
METRICS_INTERVAL = 0.5


@dataclass(frozen=True, slots=True)
class LoadConfig:
    url: str  # the deployment's base URL, e.g. http://127.0.0.1:8080
    transport: str = "sse"  # "sse" or "ws"
    users: int = 10  # closed loop: users asking one after another
    rate: float = 0.0  # open loop: new asks per second (0: closed loop)
    max_in_flight: int = 1000  # open loop: bound on asks in flight
    duration: float = 30.0  # seconds during which new asks start
    answer_timeout: float = 120.0
    questions: Sequence[str] = DEFAULT_QUESTIONS
    cached: bool = False  # repeat the questions as they are (the cache may serve them)
    backend: str = "chat"
    metrics_url: str = ""


@dataclass(slots=True)
class AnswerResult:
    started: float  # seconds since the run began
    ttft: float | None = None  # seconds to the first answer token
    total: float | None = None  # seconds to the terminal event
    # "ok", an error code, "http_<status>", "client_timeout", "transport" (the stream ended without a terminal
    # event) or "transport:<exception>" (the connection failed)
    outcome: str = ""
    cached: bool = False
    answer_chars: int = 0
    degraded: bool = False  # meta_summary.degraded: rules stood in for the model somewhere in the answer
    skipped: tuple[str, ...] = ()  # meta_summary.skipped: auxiliary calls left out (no slot in time)


@dataclass(frozen=True, slots=True)
class MetricSample:
    at: float
    running: float
    waiting: float


@dataclass(slots=True)
class Run:
    config: LoadConfig
    started_at: float = field(default_factory=time.time)
    elapsed: float = 0.0
    results: list[AnswerResult] = field(default_factory=list)
    metrics: list[MetricSample] = field(default_factory=list)
    in_flight: int = 0


def _question(config: LoadConfig, n: int) -> str:
    base = config.questions[n % len(config.questions)]
    return base if config.cached else f"{base} (#{n})"


def _record_event(event: dict[str, Any], result: AnswerResult, t0: float) -> bool:
    """Fold one event into the result; True when it was the terminal one."""
    channel = event.get("channel")
    if channel == "answer":
        if result.ttft is None:
            result.ttft = time.monotonic() - t0
        result.answer_chars += len(str(event.get("delta", "")))
    elif channel in TERMINALS:
        result.total = time.monotonic() - t0
        result.outcome = "ok" if channel == "meta_summary" else str(event.get("code", "error"))
        result.cached = bool(event.get("cached", False))
        result.degraded = bool(event.get("degraded", False))
        # meta_summary.skipped: [{"step": "planner", "reason": "slot_timeout"}, ...]
        skipped = event.get("skipped") or ()
        result.skipped = tuple(str(e.get("step", "")) if isinstance(e, dict) else str(e) for e in skipped)
        return True
    return False


async def _ask_sse(client: httpx.AsyncClient, config: LoadConfig, question: str, result: AnswerResult) -> None:
    t0 = time.monotonic()
    path = "/api/v1/rag/ask/stream_chat" if config.backend == "chat" else "/api/v1/rag/ask/stream"
    async with client.stream("POST", path, json={"question": question}) as response:
        if response.status_code != 200:
            body = await response.aread()
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                result.outcome = str(json.loads(body)["error"]["code"])
                return
            result.outcome = f"http_{response.status_code}"
            return
        async for line in response.aiter_lines():
            if line.startswith("data: ") and _record_event(json.loads(line[6:]), result, t0):
                return
    result.outcome = result.outcome or "transport"


def _ws_url(base: str) -> str:
    parts = urlsplit(base)
    return urlunsplit(parts._replace(scheme="wss" if parts.scheme == "https" else "ws", path="/ws/chat/"))


async def _ask_ws(config: LoadConfig, question: str, result: AnswerResult) -> None:
    import websockets  # only the WebSocket mode of `manage.py loadtest` pays for it (~40 ms)

    t0 = time.monotonic()
    # The chat socket checks Origin as browsers send it: the page's own scheme, host and port.
    origin = urlunsplit(urlsplit(config.url)._replace(path="", query="", fragment=""))
    connect = websockets.connect(_ws_url(config.url), open_timeout=10, max_size=2**22, origin=origin)  # type: ignore[arg-type]
    async with connect as socket:
        await socket.send(json.dumps({"type": "ask", "question": question, "backend": config.backend}))
        async for message in socket:
            if _record_event(json.loads(message), result, t0):
                return
    result.outcome = result.outcome or "transport"


async def _one(run: Run, client: httpx.AsyncClient, n: int, t_run: float) -> None:
    config = run.config
    result = AnswerResult(started=time.monotonic() - t_run)
    run.in_flight += 1
    try:
        ask = (
            _ask_sse(client, config, _question(config, n), result)
            if config.transport == "sse"
            else _ask_ws(config, _question(config, n), result)
        )
        await asyncio.wait_for(ask, timeout=config.answer_timeout)
    except TimeoutError:
        result.outcome = "client_timeout"
    except (httpx.HTTPError, OSError) as exc:
        result.outcome = f"transport:{type(exc).__name__}"
    except Exception as exc:  # a WebSocket closed mid-answer, a malformed event: counted, never fatal
        result.outcome = f"transport:{type(exc).__name__}"
    finally:
        run.in_flight -= 1
        run.results.append(result)


async def _closed_loop(run: Run, client: httpx.AsyncClient, t_run: float, counter: itertools.count[int]) -> None:
    async def user() -> None:
        while time.monotonic() - t_run < run.config.duration:
            await _one(run, client, next(counter), t_run)

    await asyncio.gather(*(user() for _ in range(run.config.users)))


async def _open_loop(run: Run, client: httpx.AsyncClient, t_run: float, counter: itertools.count[int]) -> None:
    config = run.config
    tasks: set[asyncio.Task[None]] = set()
    interval = 1.0 / config.rate
    next_at = time.monotonic()
    while time.monotonic() - t_run < config.duration:
        if run.in_flight < config.max_in_flight:
            task = asyncio.create_task(_one(run, client, next(counter), t_run))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        else:
            run.results.append(AnswerResult(started=time.monotonic() - t_run, outcome="client_overload"))
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    if tasks:
        await asyncio.wait(tasks, timeout=config.answer_timeout + 5)


def parse_gauge(text: str, name: str) -> float:
    """The sum over labels of a Prometheus gauge in `text` (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (len(line) == len(name) or line[len(name)] in "{ "):
            with contextlib.suppress(ValueError):
                total += float(line.rsplit(" ", 1)[1])
    return total


async def _sample_metrics(run: Run, t_run: float, stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(timeout=2.0) as client:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                text = (await client.get(run.config.metrics_url)).text
                run.metrics.append(
                    MetricSample(
                        at=time.monotonic() - t_run,
                        running=parse_gauge(text, "vllm:num_requests_running"),
                        waiting=parse_gauge(text, "vllm:num_requests_waiting"),
                    )
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=METRICS_INTERVAL)


async def run_load(config: LoadConfig, *, progress: Callable[[Run], Awaitable[None]] | None = None) -> Run:
    """Run the load described by `config`; `progress(run)` is awaited every two seconds while it runs."""
    if config.transport not in ("sse", "ws"):
        raise ValueError(f"transport must be 'sse' or 'ws', not {config.transport!r}")
    run = Run(config)
    t_run = time.monotonic()
    stop = asyncio.Event()
    counter = itertools.count()
    limits = httpx.Limits(max_connections=max(config.users, config.max_in_flight if config.rate else 0) + 10)
    timeout = httpx.Timeout(config.answer_timeout, connect=10.0)
    async with httpx.AsyncClient(base_url=config.url, limits=limits, timeout=timeout) as client:
        sampler = asyncio.create_task(_sample_metrics(run, t_run, stop)) if config.metrics_url else None
        driver = _open_loop if config.rate > 0 else _closed_loop
        load = asyncio.create_task(driver(run, client, t_run, counter))
        try:
            while not load.done():
                await asyncio.wait({load}, timeout=2.0)
                if progress is not None and not load.done():
                    run.elapsed = time.monotonic() - t_run
                    await progress(run)
            await load
        finally:
            stop.set()
            if sampler is not None:
                await sampler
            if not load.done():
                load.cancel()
    run.elapsed = time.monotonic() - t_run
    return run
