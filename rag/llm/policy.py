"""The LLM call policy: the one place where upstream calls are rate-limited, slot-bounded, retried and timed out.

Per call (streaming or not):

1. Wait for a requests-per-minute spot (rag.llm.ratelimit: this process's window, or the cluster's in Redis),
   holding no concurrency slot; if the spot is further away than the call's wait bound, fail fast with ``Busy``.
2. Take a concurrency slot (``concurrency.manager.get_manager().acquire(backend)``) for the attempt only. Steps 1
   and 2 share one wait bound (``SlotTerms.wait``, else ``CallPolicyConfig.acquire_timeout``, else the manager's);
   a call that gets neither in time fails with ``SlotUnavailable`` (a ``Busy``) before anything is sent, and an
   auxiliary call (planner, summary) is counted as skipped in the manager's stats.
3. Run the attempt. Retry 429, 408, 5xx, SDK timeouts and connection errors with exponential backoff and full
   jitter (never a refusal of a parameter, ``ParameterRefused``: rag.llm.capabilities steps such a request
   down), honouring ``Retry-After`` (wait max(backoff, retry_after)); the slot is released before sleeping,
   so a backing-off call never blocks a call that could run. A Retry-After beyond ``retry_after_cap`` or
   beyond the deadline fails at once, carrying the server's retry_after. No retry starts after ``retry_budget``
   seconds from the first attempt (nor past the deadline): an LLM failing every call ends the request soon.
4. Never retry once a delta has been handed to the caller (the user has seen it): any later failure ends the
   call at once. A first-token timeout is not retried either: the server accepted the request and then said
   nothing, which is overload or a stuck engine, and a second wait of the same length would double the user's
   wait while adding load.

Timeouts: first token (per attempt, from sending the request), gap between chunks once streaming, and a total
deadline that starts when the first attempt holds its slot: a long queue never cuts a call that is decoding (the
server's work would be thrown away); the queue has its own bound (step 2). Retries wait for a slot within the total
deadline. They are enforced here with asyncio rather than by the HTTP client, so each one maps to its own outcome.
The deadline, the retry budget, backoff and Retry-After waits run on the clock and sleep the policy is given
(``time.monotonic`` and ``asyncio.sleep`` unless a test injects its own); an attempt's own timeouts run on the
event loop, in real time, over what is left of the deadline. Cancellation closes the upstream HTTP stream (the
server stops generating) and releases the slot, both in ``finally``.

Failures surface as rag.errors ``Busy`` / ``UpstreamTimeout`` / ``UpstreamError``, which end the pipeline with
the matching terminal event.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import math
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from openai import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    AsyncStream,
    OpenAIError,
)

from concurrency.errors import BusyError
from concurrency.manager import LLMConcurrencyManager, get_manager
from infra.ratelimit import RateLimiter
from rag.errors import Busy, PipelineAbort, SlotUnavailable, UpstreamError, UpstreamTimeout
from rag.llm.capabilities import ParameterRefused
from rag.llm.config import CallPolicyConfig
from rag.llm.ratelimit import RateLimited, SlidingWindowRPM
from rag.llm.types import LLMDelta
from rag.state import Usage

__all__ = ["CallLabel", "CallPolicy", "SlotTerms", "StreamParser", "StreamTimeouts", "retry_after_seconds"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Statuses worth another attempt: request timeout, rate limit, and server-side failures.
_RETRY_STATUSES = frozenset({408, 429})
# Statuses that mean "the server is overloaded, come back later": reported to the user as busy, not as a fault.
_BUSY_STATUSES = frozenset({429, 503})


@dataclass(frozen=True, slots=True)
class CallLabel:
    """What a call is, for logs and error messages (never the prompt)."""

    backend: str
    node: str
    model: str
    operation: str  # "stream" | "complete" | "embed"


@dataclass(frozen=True, slots=True)
class SlotTerms:
    """How a call waits for its slot (and its requests-per-minute spot).

    ``wait``: seconds it may wait for both before it is given up unstarted (None: the policy's default).
    ``low_priority``: served only when no request's call waits (work after an answer, such as its summary).
    ``auxiliary``: the kind of an auxiliary step (planner, summary) whose rules stand in when it cannot start:
    such a call given up unstarted is counted as skipped under this kind.
    """

    wait: float | None = None
    low_priority: bool = False
    auxiliary: str | None = None


DEFAULT_SLOT = SlotTerms()


@dataclass(frozen=True, slots=True)
class StreamTimeouts:
    first_token: float
    between_tokens: float
    total: float


class StreamParser(Protocol):
    """Turns one attempt's SDK chunks into deltas; a fresh parser per attempt."""

    # True once the stream said it was complete (finish_reason / response.completed): a stream that ends
    # without it was cut off.
    finished: bool
    usage: Usage | None

    def feed(self, chunk: Any) -> Iterable[LLMDelta]:
        """Text deltas in ``chunk``; raises rag.errors.UpstreamError on an error event."""
        ...


def retry_after_seconds(headers: Any) -> float | None:
    """Seconds the server asks us to wait (``retry-after-ms``, ``retry-after`` as seconds or HTTP date)."""
    if headers is None:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw) / divisor
        except ValueError:
            if name == "retry-after":
                parsed = email.utils.parsedate_tz(raw)
                if parsed is not None:
                    return max(0.0, email.utils.mktime_tz(parsed) - time.time())
            continue
        if math.isnan(value):
            continue
        return max(0.0, value)
    return None


@dataclass(slots=True)
class _Failure:
    """Why an attempt failed, as far as the retry decision is concerned."""

    retryable: bool
    kind: str  # "status" | "timeout" | "connection" | "dropped" | "error"
    status: int | None = None
    retry_after: float | None = None
    detail: str = ""


class _AttemptFailed(Exception):
    """Carries a failure out of the slot's block, so the slot is released (and not counted as completed)."""

    def __init__(self, failure: _Failure) -> None:
        super().__init__(failure.detail)
        self.failure = failure


def _classify(exc: OpenAIError) -> _Failure:
    if isinstance(exc, ParameterRefused):
        # The server refused what was asked (rag.llm.capabilities), not for load: the same request would be
        # refused again, so it is not retried whatever the status.
        return _Failure(retryable=False, kind="refused", status=exc.status, detail=str(exc))
    if isinstance(exc, APIStatusError):
        status = exc.status_code
        return _Failure(
            retryable=status in _RETRY_STATUSES or status >= 500,
            kind="status",
            status=status,
            retry_after=retry_after_seconds(exc.response.headers),
            detail=f"HTTP {status}",
        )
    if isinstance(exc, APITimeoutError):  # before APIConnectionError: it is a subclass
        return _Failure(retryable=True, kind="timeout", detail="request timed out")
    if isinstance(exc, APIConnectionError):
        return _Failure(retryable=True, kind="connection", detail="connection error")
    # An error event inside the stream, an unparseable body...: the server answered, retrying will not help.
    return _Failure(retryable=False, kind="error", detail=type(exc).__name__)


def _final_error(label: CallLabel, failure: _Failure, attempts: int, why: str) -> PipelineAbort:
    """The terminal error for a call that will not be retried (any more)."""
    where = f"{label.backend} ({label.node})"
    if failure.status in _BUSY_STATUSES:
        seconds = f"; retry in {math.ceil(failure.retry_after)} s" if failure.retry_after else ""
        return Busy(f"The language model is overloaded{seconds}.", retry_after=failure.retry_after)
    message = f"The language model call failed ({failure.detail}, {attempts} attempt(s), {why}) on {where}."
    if failure.kind == "timeout":
        return UpstreamTimeout(message, retry_after=failure.retry_after)
    return UpstreamError(message, retry_after=failure.retry_after)


class CallPolicy:
    """Runs LLM calls under the policy; one instance per process (it owns the RPM windows)."""

    def __init__(
        self,
        config: CallPolicyConfig,
        *,
        manager: Callable[[], LLMConcurrencyManager] = get_manager,
        limiter: SlidingWindowRPM | None = None,
        windows: RateLimiter | None = None,
        rng: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self.config = config
        # A getter, not an instance: the process manager may be replaced (tests, settings reload).
        self._manager = manager
        # The clock of deadlines, the retry budget and slot waits, and the sleep of backoff and Retry-After
        # waits (the default limiter shares both). An attempt's own timeouts run on the event loop: they bound
        # real time spent waiting for the server.
        self._clock = clock
        self._sleep = sleep
        # The requests-per-minute windows: `windows` (the cluster's, in Redis) when given, else this process's.
        self.limiter = limiter or SlidingWindowRPM(
            config.rpm_for, window=config.rpm_window, clock=clock, sleep=sleep, windows=windows
        )
        self._rng = rng

    # ------------------------------------------------------------------ shared steps

    def backoff(self, attempt: int) -> float:
        """Sleep before the retry that follows failed attempt number ``attempt`` (1-based), Retry-After aside."""
        cfg = self.config
        ceiling = min(cfg.backoff_max, cfg.backoff_base * 2.0 ** min(attempt - 1, 60))
        return ceiling * self._rng() if cfg.jitter else ceiling

    async def _wait_for_rate(self, label: CallLabel, wait_until: float, slot: SlotTerms, attempt: int) -> None:
        try:
            waited = await self.limiter.wait(label.backend, max(0.0, wait_until - self._clock()))
        except RateLimited as exc:
            logger.info(
                "llm rate limit backend=%s node=%s retry_after=%.1f", label.backend, label.node, exc.retry_after
            )
            message = f"The language model request quota is used up; retry in {math.ceil(exc.retry_after)} s."
            raise self._not_started(slot, attempt, message, "rate_limit", exc.retry_after) from None
        if waited:
            logger.info("llm rate limit wait backend=%s node=%s waited_ms=%d", label.backend, label.node, waited * 1e3)

    def _wait_until(self, slot: SlotTerms, deadline: float | None) -> float:
        """When the wait for a spot and a slot gives up: the wait bound, and the deadline for a retry."""
        bound = slot.wait if slot.wait is not None else self.config.acquire_timeout
        if bound is None:
            bound = self._manager().acquire_timeout
        wait_until = self._clock() + bound
        return wait_until if deadline is None else min(wait_until, deadline)

    def _not_started(self, slot: SlotTerms, attempt: int, message: str, reason: str, retry_after: float | None) -> Busy:
        """The error for a call given up before its attempt was sent; the first one of an auxiliary step is a skip."""
        if attempt > 1:
            return Busy(message, retry_after=retry_after)
        if slot.auxiliary is not None:
            self._manager().auxiliary_skipped(slot.auxiliary)
        return SlotUnavailable(message, reason=reason, retry_after=retry_after)

    def _retry_delay(self, label: CallLabel, failure: _Failure, attempt: int, deadline: float) -> float:
        """Seconds to sleep before the next attempt, or raise the terminal error when there is none."""
        cfg = self.config
        if not failure.retryable:
            raise _final_error(label, failure, attempt, "not retryable")
        if attempt >= cfg.max_attempts:
            raise _final_error(label, failure, attempt, "no attempts left")
        if failure.retry_after is not None and failure.retry_after > cfg.retry_after_cap:
            raise _final_error(label, failure, attempt, "server asked for a longer wait than allowed")
        delay = max(self.backoff(attempt), failure.retry_after or 0.0)
        if self._clock() + delay >= deadline:
            raise _final_error(label, failure, attempt, "no time left in the call's retry budget")
        return delay

    def _retry_deadline(self, begun: float, deadline: float) -> float:
        """No retry starts past this: the retry budget from the first attempt, within the call's deadline."""
        return min(deadline, begun + self.config.retry_budget)

    def _log_attempt(
        self, label: CallLabel, attempt: int, outcome: str, started: float, failure: _Failure | None = None
    ) -> None:
        logger.info(
            "llm attempt %s/%s op=%s backend=%s node=%s model=%s outcome=%s status=%s elapsed_ms=%d",
            attempt,
            self.config.max_attempts,
            label.operation,
            label.backend,
            label.node,
            label.model,
            outcome,
            failure.status if failure else None,
            (asyncio.get_running_loop().time() - started) * 1e3,
        )

    def _busy(self, label: CallLabel, exc: BusyError, slot: SlotTerms, attempt: int) -> Busy:
        # The manager's message (slot counts, queue length) is for operators; the user gets the short version.
        logger.info("llm slot busy backend=%s node=%s reason=%s", label.backend, label.node, exc.reason)
        message = f"All language model slots are busy; retry in {math.ceil(exc.retry_after)} s."
        reason = "slot_timeout" if exc.reason == "timeout" else "queue_full"
        return self._not_started(slot, attempt, message, reason, exc.retry_after)

    def _deadline_error(self, label: CallLabel, attempt: int) -> UpstreamTimeout:
        return UpstreamTimeout(
            f"The language model did not finish in time ({label.backend}, {label.node}, {attempt} attempt(s))."
        )

    def _on_loop(self, deadline: float) -> float:
        """``deadline`` (on the policy's clock) as an event-loop time, for the attempt's own timeouts."""
        return asyncio.get_running_loop().time() + (deadline - self._clock())

    # ------------------------------------------------------------------ the retry loop

    async def _attempts(
        self,
        label: CallLabel,
        run_attempt: Callable[[int, float], AsyncGenerator[T, None]],
        total_timeout: float,
        slot: SlotTerms,
    ) -> AsyncGenerator[T, None]:
        """Steps 1 to 3 of the module docstring, shared by every kind of call: yield what
        ``run_attempt(attempt, deadline)`` (one attempt, run inside the slot, deadline on the loop's clock)
        yields, retrying it while it raises _AttemptFailed (which it must not do once it has yielded)."""
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        retry_deadline = math.inf
        attempt = 0
        while True:
            attempt += 1
            wait_until = self._wait_until(slot, deadline)
            await self._wait_for_rate(label, wait_until, slot, attempt)
            manager = self._manager()
            started = loop.time()
            try:
                async with manager.acquire(
                    label.backend, max(0.0, wait_until - self._clock()), low_priority=slot.low_priority
                ):
                    started = loop.time()
                    if deadline is None:
                        begun = self._clock()
                        deadline = begun + total_timeout
                        retry_deadline = self._retry_deadline(begun, deadline)
                    # aclosing: if our consumer stops early, the attempt's finally (closing the upstream
                    # stream) must run now, not whenever the inner generator is garbage-collected.
                    async with contextlib.aclosing(run_attempt(attempt, self._on_loop(deadline))) as items:
                        async for item in items:
                            yield item
                    return
            except BusyError as exc:
                raise self._busy(label, exc, slot, attempt) from None
            except _AttemptFailed as failed:
                self._log_attempt(label, attempt, failed.failure.kind, started, failed.failure)
                # Out of the slot's block: the slot is already released while we sleep.
                await self._sleep(self._retry_delay(label, failed.failure, attempt, retry_deadline))

    # ------------------------------------------------------------------ non-streaming calls

    async def call(
        self,
        label: CallLabel,
        attempt_fn: Callable[[], Awaitable[T]],
        *,
        total_timeout: float,
        slot: SlotTerms = DEFAULT_SLOT,
    ) -> T:
        """Run ``attempt_fn`` (one upstream request) under the policy; the attempt may take the whole deadline,
        which starts when the first attempt holds its slot."""

        async def run_attempt(attempt: int, deadline: float) -> AsyncGenerator[T, None]:
            started = asyncio.get_running_loop().time()
            try:
                async with asyncio.timeout_at(deadline):
                    result = await attempt_fn()
            except TimeoutError:
                self._log_attempt(label, attempt, "deadline", started)
                raise self._deadline_error(label, attempt) from None
            except OpenAIError as exc:
                raise _AttemptFailed(_classify(exc)) from exc
            self._log_attempt(label, attempt, "ok", started)
            yield result

        results = [result async for result in self._attempts(label, run_attempt, total_timeout, slot)]
        return results[0]

    # ------------------------------------------------------------------ streaming calls

    async def stream(
        self,
        label: CallLabel,
        open_stream: Callable[[], Awaitable[AsyncStream[Any]]],
        new_parser: Callable[[], StreamParser],
        timeouts: StreamTimeouts,
        slot: SlotTerms = DEFAULT_SLOT,
    ) -> AsyncGenerator[LLMDelta, None]:
        """Yield the deltas of one streamed completion, then one ``usage`` delta when the server reported it.

        The total deadline starts when the first attempt holds its slot. Consume it with ``contextlib.aclosing``
        (or run it to the end): a generator abandoned half-way holds its slot and upstream stream until it is
        garbage-collected.
        """

        def run_attempt(attempt: int, deadline: float) -> AsyncGenerator[LLMDelta, None]:
            return self._attempt(label, attempt, open_stream, new_parser(), timeouts, deadline)

        async with contextlib.aclosing(self._attempts(label, run_attempt, timeouts.total, slot)) as deltas:
            async for delta in deltas:
                yield delta

    async def _attempt(
        self,
        label: CallLabel,
        attempt: int,
        open_stream: Callable[[], Awaitable[AsyncStream[Any]]],
        parser: StreamParser,
        timeouts: StreamTimeouts,
        deadline: float,
    ) -> AsyncGenerator[LLMDelta, None]:
        """One attempt, run inside the slot. Raises _AttemptFailed only while nothing has been yielded."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        # Until the first delta, one budget covers connecting, the response headers and the first chunks
        # (a role-only chunk is not a token); after it, each chunk gets the gap budget.
        expires = min(started + timeouts.first_token, deadline)
        stream: AsyncStream[Any] | None = None
        delivered = False
        try:
            try:
                async with asyncio.timeout_at(expires):
                    stream = await open_stream()
                chunks = stream.__aiter__()
                while True:
                    if delivered:
                        expires = min(loop.time() + timeouts.between_tokens, deadline)
                    try:
                        async with asyncio.timeout_at(expires):
                            chunk = await anext(chunks)
                    except StopAsyncIteration:
                        break
                    for delta in parser.feed(chunk):
                        delivered = True
                        yield delta
            except TimeoutError:
                raise self._timeout_error(
                    label, attempt, started, timeouts, hit_deadline=expires >= deadline, delivered=delivered
                ) from None
            except OpenAIError as exc:
                failure = _classify(exc)
                if parser.finished:
                    # The answer was complete (finish_reason / response.completed seen); only the tail of the
                    # stream (usage, [DONE]) was lost. Not worth failing a whole answer the user has read.
                    self._log_attempt(label, attempt, "ok_truncated_tail", started, failure)
                    if parser.usage is not None:
                        yield LLMDelta("usage", usage=parser.usage)
                    return
                if delivered:
                    self._log_attempt(label, attempt, "failed_mid_stream", started, failure)
                    raise UpstreamError(
                        f"The language model stream broke off mid-answer ({failure.detail}; {label.backend}, "
                        f"{label.node})."
                    ) from exc
                raise _AttemptFailed(failure) from exc
            if not parser.finished:
                # The connection ended without the stream's own end marker: cut off (proxy, crash, drop).
                failure = _Failure(retryable=True, kind="dropped", detail="stream ended early")
                if delivered:
                    self._log_attempt(label, attempt, "dropped_mid_stream", started, failure)
                    raise UpstreamError(
                        f"The language model stream ended before the answer was complete ({label.backend}, "
                        f"{label.node})."
                    )
                raise _AttemptFailed(failure)
            self._log_attempt(label, attempt, "ok", started)
            if parser.usage is not None:
                yield LLMDelta("usage", usage=parser.usage)
        finally:
            if stream is not None:
                # Closing the response closes the connection mid-body, which is how the server learns to stop
                # generating (vLLM aborts the request on disconnect). Runs on cancellation too.
                await stream.close()

    def _timeout_error(
        self,
        label: CallLabel,
        attempt: int,
        started: float,
        timeouts: StreamTimeouts,
        *,
        hit_deadline: bool,
        delivered: bool,
    ) -> UpstreamTimeout:
        if hit_deadline:
            self._log_attempt(label, attempt, "deadline", started)
            return self._deadline_error(label, attempt)
        if not delivered:
            self._log_attempt(label, attempt, "first_token_timeout", started)
            return UpstreamTimeout(
                f"The language model sent nothing for {timeouts.first_token:g} s ({label.backend}, {label.node})."
            )
        self._log_attempt(label, attempt, "stalled", started)
        return UpstreamTimeout(
            f"The language model stopped sending for {timeouts.between_tokens:g} s mid-answer "
            f"({label.backend}, {label.node})."
        )
