"""Running the pipeline for one request, and the process-wide pieces every run shares.

`PipelineRuntime` owns what is loaded once per process (the node registry, the dependencies built from
settings, the compiled-graph cache, the workflow of each backend). `PipelineRun` is one request: the graph
runs in its own task and writes events into a bounded channel; `events()` yields them to a transport until
the single terminal event. Closing the iterator early, or calling `cancel()`, cancels the task; whatever was
held (LLM slots, upstream streams) is released by the nodes' own `finally` blocks.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from concurrency.context import request_scope
from concurrency.errors import BusyError
from rag.conversation_summary import AnsweredTurn, ConversationSummarizer
from rag.engine import CompiledGraph, GraphCache, NodeRegistry, WorkflowDefinition, compile_workflow
from rag.errors import PipelineAbort
from rag.events import Coalescing, Event, EventChannel, StreamWriter, Summary
from rag.outcome import PipelineOutcome, outcome_of, pipeline_outcome
from rag.state import PipelineState
from rag.values import Turn

logger = logging.getLogger(__name__)

BACKENDS = ("chat", "responses")


@dataclass(frozen=True, slots=True)
class AskRequest:
    question: str
    backend: str = "chat"
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    conversation_id: str = ""
    client_id: str = ""
    client_address: str = ""
    client_identified: bool = True
    history: tuple[Turn, ...] = ()
    summary: str = ""
    degraded_allowed: bool = True  # False: a failed answer LLM ends the request with its error, never degraded


def _error_code_of(exc: BaseException) -> tuple[str, str, float | None]:
    if isinstance(exc, PipelineAbort):
        return exc.code, exc.message, exc.retry_after
    if isinstance(exc, BusyError):
        return "busy", str(exc), exc.retry_after
    if isinstance(exc, TimeoutError):
        return "timeout", str(exc) or "the request took too long", None
    return "internal", f"internal error ({type(exc).__name__})", None


class PipelineRun:
    """One request running through a compiled graph."""

    def __init__(
        self,
        graph: CompiledGraph,
        state: PipelineState,
        *,
        stream_timeout: float,
        idle_timeout: float,
        telemetry: Any = None,
        coalescing: Coalescing | None = None,
        summarizer: ConversationSummarizer | None = None,
    ):
        self.graph = graph
        self.state = state
        self.channel = EventChannel()
        self.writer = StreamWriter(state.request_id, self.channel, coalescing=coalescing)
        self.started = time.monotonic()
        self.finished: float | None = None
        self._stream_timeout = stream_timeout
        self._idle_timeout = idle_timeout
        self._cancel_reason = ""
        self._cancel_code = "cancelled"
        self._cancel_payload: dict[str, Any] = {}
        self._telemetry = telemetry
        self._summarizer = summarizer
        self._task: asyncio.Task[None] | None = None

    def start(self) -> PipelineRun:
        if self._task is None:
            self._task = asyncio.create_task(self._main(), name=f"pipeline-{self.state.request_id}")
        return self

    @property
    def request_id(self) -> str:
        return self.state.request_id

    @property
    def terminal(self) -> Event | None:
        return self.writer.terminal

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()

    def cancel(self, reason: str = "the request was cancelled", *, code: str = "cancelled", **payload: Any) -> None:
        """Stop the run; its terminal event is the `error` `code` (default `cancelled`) with `reason` and `payload`
        (a worker that stops ends its answers with `unavailable` and a `retry_after`)."""
        if self._task is not None and not self._task.done():
            self._cancel_reason, self._cancel_code, self._cancel_payload = reason, code, payload
            self._task.cancel()
            # A task cancelled before it first ran never enters `_main`: close the stream for it (a second
            # terminal is ignored, so this is harmless when `_main` did write one).
            self._task.add_done_callback(lambda _task: self.writer.fail(code, reason, **payload))

    async def wait(self, max_wait: float = 5.0) -> None:
        """Wait for the task to end (after a cancel, for example), at most `max_wait` seconds."""
        if self._task is not None and not self._task.done():
            await asyncio.wait({self._task}, timeout=max_wait)

    async def events(self) -> AsyncGenerator[Event, None]:
        """Every event of the run in order, ending with the terminal one."""
        self.start()
        try:
            while True:
                try:
                    event = await self.channel.get(self._idle_timeout)
                except TimeoutError:
                    # Silent for longer than any step may take: end the stream with its one terminal (a second
                    # one from the pipeline is ignored) rather than raising into the transport.
                    self.writer.fail("timeout", f"the answer made no progress for {self._idle_timeout:g} s")
                    continue
                yield event
                if event["channel"] in ("meta_summary", "error"):
                    return
        finally:
            # The consumer went away (disconnect, cancel) or saw the end: either way the task must not outlive it.
            if not self.done:
                self.cancel("the client went away")
                await self.wait()

    async def _main(self) -> None:
        state, writer = self.state, self.writer
        telemetry = self._telemetry
        # In the run's own task: the sampling decision and the trace's ContextVar belong to this request.
        observer = telemetry.begin(state) if telemetry is not None else None
        try:
            # The request context lets the concurrency manager's priority mode count this request's finished calls.
            with request_scope(state.request_id, arrival=self.started):
                async with asyncio.timeout(self._stream_timeout):
                    await self.graph.run(state, writer, observer=observer)
        except asyncio.CancelledError:
            writer.fail(self._cancel_code, self._cancel_reason or "the request was cancelled", **self._cancel_payload)
            raise
        except BaseException as exc:
            code, message, retry_after = _error_code_of(exc)
            if code == "internal":
                logger.exception("pipeline run %s failed", state.request_id)
            state.fail(code, message, retry_after=retry_after)
        finally:
            # The one place a run's trace is finished: answered, failed and cancelled runs all pass here, before
            # the terminal event (so the exchange records whether its trace went out).
            self.finished = time.monotonic()
            if telemetry is not None:
                telemetry.finish(state)
        if state.error is not None:
            extra: dict[str, Any] = (
                {"retry_after": state.error.retry_after} if state.error.retry_after is not None else {}
            )
            writer.fail(state.error.code, state.error.message, **extra)
        else:
            self._summary_unless_planned()
            writer.finish(self.summary())

    def _summary_unless_planned(self) -> None:
        """Plan the conversation summary of an answered turn that no node planned (a workflow without
        response_synth, a cached or curated answer), with the default policy: the summary never depends on which
        nodes a workflow has. Before the terminal event, so the outcome recorded with it carries the summary."""
        state = self.state
        if self._summarizer is None or state.new_summary or not state.answer.strip():
            return
        planned = self._summarizer.plan(AnsweredTurn.of(state))
        state.new_summary, state.summary_job = planned.offline, planned.job

    def outcome(self) -> PipelineOutcome:
        """The run's typed outcome, once it has ended (or been cancelled: then it counts as an error)."""
        elapsed_ms = round(((self.finished or time.monotonic()) - self.started) * 1000, 1)
        return pipeline_outcome(self.state, terminal=self.terminal, elapsed_ms=elapsed_ms)

    def summary(self) -> Summary:
        state = self.state
        best = max((chunk.score for chunk in state.retrieved), default=None)
        return {
            "conversation_id": state.conversation_id,
            "backend": state.backend,
            "language": state.language,
            "intent": state.intent,
            "search_query": state.search_query,
            "loops": state.loops,
            "tools": list(state.tools_used),
            "cached": state.cache_hit is not None and state.curated_hit is None,
            "curated": state.curated_hit is not None,
            "degraded": state.degraded,
            "retrieval_fallback": state.retrieval_fallback,
            "outcome": outcome_of(state, failed=False),
            "best_score": None if best is None else round(float(best), 4),
            "skipped": [step.as_dict() for step in state.skipped],
            "sources": [source.as_dict() for source in state.sources],
            "attachments": [{"name": a.name, "url": a.url, "media_type": a.media_type} for a in state.attachments],
            "usage": state.usage.as_dict(),
            "trace_id": state.trace_id,
            "elapsed_ms": round(((self.finished or time.monotonic()) - self.started) * 1000, 1),
        }


def _fingerprint_params(deps: Any) -> dict[str, Any]:
    return getattr(getattr(deps, "config", None), "as_fingerprint", dict)()


class PipelineRuntime:
    """Process-wide: node registry, dependencies, compiled-graph cache and each backend's workflow."""

    def __init__(
        self,
        *,
        registry: NodeRegistry,
        deps_factory: Callable[[], Any],
        default_workflow: WorkflowDefinition,
        stream_timeout: float = 180.0,
        idle_timeout: float = 60.0,
        coalescing: Coalescing | None = None,
    ) -> None:
        self.registry = registry
        self.graph_cache = GraphCache()
        self._deps_factory = deps_factory
        self._deps: Any = None
        self._summarizer: ConversationSummarizer | None = None
        self._deps_lock = asyncio.Lock()
        self._default_workflow = default_workflow
        self._workflows: dict[str, WorkflowDefinition] = {}
        self.stream_timeout = stream_timeout
        self.idle_timeout = idle_timeout
        self.coalescing = coalescing  # how answer deltas are merged into frames (None: one event per delta)

    async def deps(self) -> Any:
        """Dependencies are built once, off the event loop (opening the store loads its replica)."""
        if self._deps is None:
            async with self._deps_lock:
                if self._deps is None:
                    self._adopt(await asyncio.to_thread(self._deps_factory))
        return self._deps

    def preload(self) -> Any:
        """Build the dependencies now, from sync code at start-up (the first request then finds them ready)."""
        if self._deps is None:
            self._adopt(self._deps_factory())
        return self._deps

    def _adopt(self, deps: Any) -> None:
        # the semantic cache's purge deletes answers of producers no longer configured: it asks the runtime
        set_producers = getattr(getattr(deps, "cache", None), "set_producers", None)
        if callable(set_producers):
            set_producers(self.producers)
        # the summary of a turn no node summarised, with the default policy and the dependencies' model
        self._summarizer = ConversationSummarizer(
            llm=getattr(deps, "llm", None),
            prompts=getattr(deps, "prompts", None),
            stats=getattr(deps, "answer_stats", None),
        )
        self._deps = deps

    def set_workflow(self, backend: str, definition: WorkflowDefinition | None) -> None:
        """Publish a workflow for a backend (None returns it to the default). Runs in flight keep theirs."""
        if definition is None:
            self._workflows.pop(backend, None)
        else:
            self._workflows[backend] = definition

    def workflow_for(self, backend: str) -> WorkflowDefinition:
        return self._workflows.get(backend, self._default_workflow)

    def compile(self, definition: WorkflowDefinition, deps: Any) -> CompiledGraph:
        return self.graph_cache.get_or_compile(
            definition,
            lambda d, key: compile_workflow(d, registry=self.registry, deps=deps, fingerprint=key),
            params=_fingerprint_params(deps),
        )

    def producer(self, backend: str, fingerprint: str, deps: Any) -> str:
        """What answers a request of `backend`: the backend, the answering model ("offline" without an LLM) and
        the workflow's fingerprint. A cached answer is served only to requests with the same producer."""
        llm = getattr(deps, "llm", None)
        model = "offline" if llm is None else llm.config.model_for(backend, "response_synth")
        return f"{backend}/{model}/{fingerprint[:16]}"

    def producers(self) -> set[str] | None:
        """The producers of every backend as configured now (None before the dependencies are built)."""
        deps = self._deps
        if deps is None:
            return None
        params = _fingerprint_params(deps)
        return {self.producer(backend, self.workflow_for(backend).fingerprint(params), deps) for backend in BACKENDS}

    async def start(self, request: AskRequest, *, workflow: WorkflowDefinition | None = None) -> PipelineRun:
        if request.backend not in BACKENDS:
            raise ValueError(f"unknown backend {request.backend!r}; expected one of {', '.join(BACKENDS)}")
        deps = await self.deps()
        graph = self.compile(workflow or self.workflow_for(request.backend), deps)
        state = PipelineState(
            request_id=request.request_id,
            question=request.question,
            backend=request.backend,
            conversation_id=request.conversation_id,
            client_id=request.client_id,
            client_address=request.client_address,
            client_identified=request.client_identified,
            history=list(request.history),
            summary=request.summary,
            degraded_allowed=request.degraded_allowed,
            producer=self.producer(request.backend, graph.fingerprint, deps),
        )
        return PipelineRun(
            graph,
            state,
            stream_timeout=self.stream_timeout,
            idle_timeout=self.idle_timeout,
            telemetry=getattr(deps, "telemetry", None),
            coalescing=self.coalescing,
            summarizer=self._summarizer,
        ).start()

    def close(self) -> None:
        """Release what the dependencies hold (the local store's lock, above all)."""
        for owner in (self._deps, getattr(self._deps, "retriever", None)):
            closer = getattr(owner, "close", None)
            if callable(closer):
                closer()
                break
        self._deps = None
        self.graph_cache.clear()
