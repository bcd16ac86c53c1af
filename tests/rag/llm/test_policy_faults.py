"""The call policy against injected faults: what is retried, how long it waits, what the user ends up with, and
that the upstream server saw exactly the attempts the policy made. The transport faults run on each HTTP stack
(LLM_HTTP_CLIENT): the policy must see the same failure from httpx and from aiohttp."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

from concurrency.manager import LLMConcurrencyManager
from devtools.simulator.testing import SimulatorProcess, free_port
from rag.errors import Busy, UpstreamError, UpstreamTimeout
from rag.llm import LLMBackend, LLMDelta
from rag.llm.backends import ChatBackend
from tests.rag.llm.conftest import USER, AttemptLog, BackendFactory, VirtualTime, on_each_http_client, wait_idle
from tests.waiting import until_async


async def stream_all(backend: LLMBackend, api: ChatBackend = "chat", **kwargs: Any) -> list[LLMDelta]:
    out: list[LLMDelta] = []
    async with contextlib.aclosing(backend.stream_answer(backend=api, node="n", messages=USER, **kwargs)) as deltas:
        async for delta in deltas:
            out.append(delta)
    return out


async def upstream_attempts(sim: SimulatorProcess, api: str = "chat") -> int:
    return int((await sim.astats())["endpoints"][api]["attempts"])


@on_each_http_client
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_429_waits_for_retry_after_then_succeeds(
    api: ChatBackend,
    make_backend: BackendFactory,
    sim: SimulatorProcess,
    attempts: AttemptLog,
    virtual_time: VirtualTime,
) -> None:
    await sim.afaults(fail_next=["429"], retry_after=2)
    deltas = await stream_all(make_backend(time=virtual_time), api)

    assert virtual_time.sleeps == [2.0]  # Retry-After wins over the (tiny) backoff
    assert deltas[-1].kind == "usage"
    assert attempts.outcomes == ["status", "ok"]
    assert await upstream_attempts(sim, api) == attempts.count == 2


async def test_server_errors_are_retried_max_attempts_times_then_upstream_error(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(fail_next=["500"] * 6)
    with pytest.raises(UpstreamError, match="HTTP 500, 4 attempt"):
        await stream_all(make_backend(max_attempts=4))
    assert attempts.count == 4
    assert await upstream_attempts(sim) == 4


async def test_an_llm_failing_every_call_ends_within_the_retry_budget_as_upstream_error(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog, virtual_time: VirtualTime
) -> None:
    await sim.afaults(rate_500=1.0)
    backend = make_backend(time=virtual_time, max_attempts=1000, backoff_base=0.1, backoff_max=0.1, retry_budget=1.0)
    with pytest.raises(UpstreamError, match="retry budget"):
        await stream_all(backend)
    # The call's deadline is 20 s; the 1 s budget ended it: the backoffs it slept fit in the budget.
    assert virtual_time.sleeps and set(virtual_time.sleeps) == {0.1}
    assert sum(virtual_time.sleeps) < 1.0
    assert 2 <= attempts.count == len(virtual_time.sleeps) + 1 == await upstream_attempts(sim)


async def test_a_429_on_every_call_ends_within_the_retry_budget_as_busy_with_retry_after(
    make_backend: BackendFactory, sim: SimulatorProcess, virtual_time: VirtualTime
) -> None:
    await sim.afaults(rate_429=1.0, retry_after=2)
    with pytest.raises(Busy) as busy:
        await stream_all(make_backend(time=virtual_time, retry_budget=3.0))
    # One Retry-After wait fits in the 3 s budget; a second one would end past it, so the call stops there.
    assert virtual_time.sleeps == [2.0]
    assert busy.value.retry_after == 2.0
    assert await upstream_attempts(sim) == 2


@on_each_http_client
async def test_complete_and_embed_are_retried_too(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(fail_next=["503", "ok"], endpoints=["chat", "embeddings"])
    backend = make_backend()
    result = await backend.complete(backend="chat", node="n", messages=USER)
    await sim.afaults(fail_next=["502"])
    vectors = await backend.embed(["hello"])
    assert result.text and len(vectors) == 1
    assert attempts.outcomes == ["status", "ok", "status", "ok"]
    stats = await sim.astats()
    assert stats["endpoints"]["chat"]["attempts"] == 2 and stats["endpoints"]["embeddings"]["attempts"] == 2


@pytest.mark.parametrize(("status", "retried"), [("400", False), ("404", False), ("408", True)])
async def test_client_errors_other_than_408_and_429_are_not_retried(
    status: str, retried: bool, make_backend: BackendFactory, sim: SimulatorProcess
) -> None:
    await sim.afaults(fail_next=[status, status])
    with pytest.raises(UpstreamError, match=f"HTTP {status}"):
        await stream_all(make_backend(max_attempts=2))
    assert await upstream_attempts(sim) == (2 if retried else 1)


async def test_retry_after_beyond_the_cap_fails_fast_as_busy(
    make_backend: BackendFactory, sim: SimulatorProcess, virtual_time: VirtualTime
) -> None:
    await sim.afaults(fail_next=["429"], retry_after=30)
    with pytest.raises(Busy) as info:
        await stream_all(make_backend(time=virtual_time, retry_after_cap=5))
    assert virtual_time.sleeps == []
    assert info.value.retry_after == 30 and info.value.code == "busy"
    assert await upstream_attempts(sim) == 1


async def test_retry_after_beyond_the_deadline_fails_fast(
    make_backend: BackendFactory, sim: SimulatorProcess, virtual_time: VirtualTime
) -> None:
    await sim.afaults(fail_next=["429"], retry_after=3)
    with pytest.raises(Busy) as info:
        await stream_all(make_backend(time=virtual_time, total_timeout=2.0))
    assert virtual_time.sleeps == [] and info.value.retry_after == 3
    assert await upstream_attempts(sim) == 1


@on_each_http_client
async def test_hang_before_first_token_times_out_without_retry(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(fail_next=["hang"])  # headers, then silence until the client leaves
    started = time.monotonic()
    with pytest.raises(UpstreamTimeout) as info:
        await stream_all(make_backend(first_token_timeout=1.0), "responses")
    elapsed = time.monotonic() - started
    assert elapsed >= 1.0  # the deadline was waited for; that it was not retried, the attempts say
    assert info.value.code == "timeout"
    assert attempts.outcomes == ["first_token_timeout"]
    assert await upstream_attempts(sim, "responses") == 1
    assert (await wait_idle(sim))["aborted"] == 1  # we hung up, so the server stopped


@on_each_http_client
async def test_drop_mid_stream_is_an_upstream_error_and_never_retried(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(fail_next=["drop:6"])
    received: list[LLMDelta] = []
    with pytest.raises(UpstreamError):
        async with contextlib.aclosing(make_backend().stream_answer(backend="chat", node="n", messages=USER)) as it:
            async for delta in it:
                received.append(delta)
    assert [d.kind for d in received] == ["reasoning"] * 4 + ["answer"] * 2
    assert attempts.outcomes == ["failed_mid_stream"]
    assert await upstream_attempts(sim) == 1


@on_each_http_client
async def test_drop_before_the_first_token_is_retried(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(fail_next=["drop:0"])
    deltas = await stream_all(make_backend())
    assert deltas[-1].kind == "usage"
    assert len(attempts.outcomes) == 2 and attempts.outcomes[-1] == "ok"
    assert await upstream_attempts(sim) == 2


@on_each_http_client
async def test_stall_mid_stream_times_out_on_the_gap_without_retry(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(fail_next=["stall:6:5"])
    started = time.monotonic()
    with pytest.raises(UpstreamTimeout, match="stopped sending"):
        await stream_all(make_backend(between_tokens_timeout=0.5))
    assert time.monotonic() - started < 1.5
    assert attempts.outcomes == ["stalled"] and await upstream_attempts(sim) == 1


@on_each_http_client
@pytest.mark.parametrize("operation", ["stream", "complete"])
async def test_the_whole_call_deadline_ends_a_call_that_keeps_within_its_other_timeouts(
    operation: str, make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    # Streamed: two tokens, then 30 s of silence, well inside the 10 s gap budget. Not streamed: no answer at all.
    await sim.afaults(fail_next=["stall:2:30" if operation == "stream" else "hang"])
    backend = make_backend(first_token_timeout=10.0, between_tokens_timeout=10.0, total_timeout=1.5)
    started = time.monotonic()
    with pytest.raises(UpstreamTimeout, match="did not finish in time") as info:
        if operation == "stream":
            await stream_all(backend)
        else:
            await backend.complete(backend="chat", node="n", messages=USER)
    # What ended it: the whole call's deadline (its error and its attempt's outcome), not the 10 s budgets, which
    # would have ended it as "first_token_timeout" or "stalled". And not before the deadline: one wall-clock bound.
    assert info.value.code == "timeout"
    assert attempts.outcomes == ["deadline"] and await upstream_attempts(sim) == 1
    assert time.monotonic() - started >= 1.5
    assert (await wait_idle(sim))["aborted"] == 1  # the abandoned request was closed upstream


@on_each_http_client
async def test_connection_refused_is_retried_then_one_upstream_error(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"  # bound and released: nothing listens there
    with pytest.raises(UpstreamError, match="connection error, 3 attempt") as info:
        await stream_all(make_backend(base_url=closed, max_attempts=3))
    assert info.value.code == "upstream_error"
    assert attempts.outcomes == ["connection"] * 3


@on_each_http_client
async def test_a_connect_timeout_is_retried_then_one_timeout(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog, unanswered_port: int
) -> None:
    backend = make_backend(base_url=f"http://127.0.0.1:{unanswered_port}/v1", connect_timeout=0.3, max_attempts=2)
    started = time.monotonic()
    with pytest.raises(UpstreamTimeout, match="request timed out, 2 attempt") as info:
        await stream_all(backend)
    # What ended it: two connect timeouts (outcome "timeout"; the 5 s first-token budget would say
    # "first_token_timeout"), each waited in full: one wall-clock bound.
    assert info.value.code == "timeout"
    assert attempts.outcomes == ["timeout", "timeout"]
    assert time.monotonic() - started >= 0.6


class HeldSleep(VirtualTime):
    """A backoff that lasts until the test lets it end."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeping = asyncio.Event()
        self.wake = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.sleeping.set()
        await self.wake.wait()
        await super().sleep(seconds)


async def test_slot_is_released_while_sleeping_between_attempts(
    make_backend: BackendFactory, sim: SimulatorProcess, manager: LLMConcurrencyManager
) -> None:
    manager.set_limit("chat", 1)
    await sim.afaults(fail_next=["500"])
    held = HeldSleep()
    retrying = asyncio.create_task(stream_all(make_backend(time=held, backoff_base=1.0, backoff_max=1.0)))
    await asyncio.wait_for(held.sleeping.wait(), 5)  # the first attempt failed; its 1 s backoff has begun

    assert not retrying.done()
    assert manager.stats()["backends"]["chat"]["in_progress"] == 0
    # With a limit of one, another call can run to completion while the first one backs off.
    other = await stream_all(make_backend())
    assert other[-1].kind == "usage" and not retrying.done()
    held.wake.set()
    assert (await retrying)[-1].kind == "usage"
    assert held.sleeps == [1.0]
    assert await upstream_attempts(sim) == 3


async def test_no_free_slot_is_busy_with_retry_after(
    make_backend: BackendFactory, manager: LLMConcurrencyManager
) -> None:
    manager.set_limit("chat", 1)
    async with manager.acquire("chat"):
        with pytest.raises(Busy) as info:
            await stream_all(make_backend(acquire_timeout=0.1))
    assert info.value.retry_after is not None and info.value.retry_after >= 1


@on_each_http_client
@pytest.mark.parametrize("how", ["cancel", "break"])
async def test_leaving_mid_stream_closes_the_upstream_request_and_frees_the_slot(
    how: str, make_backend: BackendFactory, sim: SimulatorProcess, manager: LLMConcurrencyManager
) -> None:
    await sim.afaults(fail_next=["stall:6:30"])  # streams 6 tokens, then would sit on a GPU slot for 30 s
    first_deltas = asyncio.Event()

    async def consume() -> None:
        seen = 0
        async with contextlib.aclosing(make_backend().stream_answer(backend="chat", node="n", messages=USER)) as it:
            async for _ in it:
                seen += 1
                if seen == 6:
                    first_deltas.set()
                    if how == "break":
                        break

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_deltas.wait(), 5)
    if how == "cancel":
        await until_async(sim.astats, lambda stats: stats["running"] == 1)  # the stall: still on its slot upstream
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        await task
    assert manager.stats()["backends"]["chat"]["in_progress"] == 0
    stats = await wait_idle(sim, within=1.0)
    assert stats["aborted"] == 1 and stats["completed"] == 0
