"""In-process tests of the pieces: scheduler, timing, schema instances, text, faults, the ASGI app itself."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from devtools.simulator import ConfigError, FaultConfig, SimulatorConfig, build_app
from devtools.simulator.asgi_io import ABORT_EXTENSION, ConnectionDropped
from devtools.simulator.config import parse_directive
from devtools.simulator.embeddings import embed
from devtools.simulator.faults import FaultInjector, FaultPlan
from devtools.simulator.scheduler import QueueFull, Scheduler, TimingModel
from devtools.simulator.schema import instance_for_schema
from devtools.simulator.text import Prompt
from tests.waiting import until

# -- scheduler ------------------------------------------------------------------------------------------


async def test_scheduler_is_fifo_and_cancelled_waiters_leave() -> None:
    scheduler = Scheduler(max_num_seqs=1, max_waiting=10)
    order: list[str] = []

    async def holder(name: str, hold: asyncio.Event) -> None:
        async with scheduler.slot():
            order.append(name)
            await hold.wait()

    events = {name: asyncio.Event() for name in "abcd"}
    tasks = {}
    for name in "abcd":
        tasks[name] = asyncio.create_task(holder(name, events[name]))
        await asyncio.sleep(0)
    assert (scheduler.running, scheduler.waiting) == (1, 3)
    tasks["c"].cancel()
    await asyncio.sleep(0)
    assert scheduler.waiting == 2
    for name in "abd":
        events[name].set()
        await tasks[name]  # its slot goes to the next waiter
    assert order == ["a", "b", "d"]
    assert (scheduler.running, scheduler.waiting) == (0, 0)


async def test_scheduler_passes_on_a_slot_handed_to_a_cancelled_waiter() -> None:
    scheduler = Scheduler(max_num_seqs=1, max_waiting=10)
    await scheduler.acquire()
    second = asyncio.create_task(scheduler.acquire())
    third = asyncio.create_task(scheduler.acquire())
    await asyncio.sleep(0)
    scheduler.release()  # hands the slot to `second`...
    second.cancel()  # ...which is cancelled before it runs
    await asyncio.sleep(0)
    await third
    assert second.cancelled() and (scheduler.running, scheduler.waiting) == (1, 0)


async def test_scheduler_bounds_the_queue() -> None:
    scheduler = Scheduler(max_num_seqs=1, max_waiting=1)
    await scheduler.acquire()
    waiter = asyncio.create_task(scheduler.acquire())
    await asyncio.sleep(0)
    with pytest.raises(QueueFull):
        await scheduler.acquire()
    waiter.cancel()


async def test_a_larger_batch_admits_waiters_at_once_and_a_smaller_one_lets_the_running_finish() -> None:
    scheduler = Scheduler(max_num_seqs=1, max_waiting=10)
    await scheduler.acquire()
    waiters = [asyncio.create_task(scheduler.acquire()) for _ in range(3)]
    await asyncio.sleep(0)
    assert (scheduler.running, scheduler.waiting) == (1, 3)

    scheduler.resize(3, 10)
    await asyncio.sleep(0)
    assert (scheduler.running, scheduler.waiting) == (3, 1) and [w.done() for w in waiters] == [True, True, False]

    scheduler.resize(1, 10)  # three run: the next releases give their slots up until one runs
    scheduler.release()
    scheduler.release()
    await asyncio.sleep(0)
    assert (scheduler.running, scheduler.waiting) == (1, 1) and not waiters[2].done()
    scheduler.release()  # now at the bound: the slot goes to the oldest waiter
    await waiters[2]
    assert (scheduler.running, scheduler.waiting) == (1, 0)


def test_timing_grows_with_running() -> None:
    config = SimulatorConfig(max_num_seqs=4, ttft_ms=100, prefill_ms_per_token=1, tpot_ms=10, batch_slowdown=2)
    scheduler = Scheduler(4, 10)
    timing = TimingModel(config, scheduler)
    assert timing.tpot_seconds() == pytest.approx(0.010)
    assert timing.prefill_seconds(50) == pytest.approx(0.150)
    scheduler._running = 3
    assert timing.tpot_seconds() == pytest.approx(0.010 * (1 + 2 * 2 / 4))


# -- content --------------------------------------------------------------------------------------------


def test_schema_instance_covers_common_constructs() -> None:
    schema: dict[str, Any] = {
        "$defs": {
            "Level": {"enum": ["low", "high"]},
            "Item": {"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}},
        },
        "type": "object",
        "properties": {
            "level": {"$ref": "#/$defs/Level"},
            "item": {"allOf": [{"$ref": "#/$defs/Item"}]},
            "maybe": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 4}]},
            "kind": {"const": "fixed"},
            "code": {"type": ["string", "null"], "minLength": 40},
            "ratio": {"type": "number", "minimum": -5, "maximum": -2},
            "when": {"type": "string", "format": "date-time"},
            "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}]},
            "optional": {"type": "string"},
        },
        "required": ["level", "item", "maybe", "kind", "code", "ratio", "when", "pair"],
    }
    schema["$defs"]["N"] = {"type": "integer", "maximum": -3}
    value = instance_for_schema(schema, question="is the priority HIGH?", summary="Summary: x", chinese=False)
    assert value == {
        "level": "high",
        "item": {"n": -3},
        "maybe": "Summ",
        "kind": "fixed",
        "code": "Summary: x" + "x" * 30,
        "ratio": -5.0,
        "when": "2025-01-01T00:00:00Z",
        "pair": [0, False],
    }


def test_prompt_language_sources_and_determinism() -> None:
    prompt = Prompt.from_messages(
        [
            {"role": "system", "content": "[3] 退款需在七天內申請。\n[5] 請附上收據。"},
            {"role": "user", "content": "如何退款？"},
        ]
    )
    tokens = prompt.answer_tokens(40)
    assert prompt.chinese and sorted(prompt.sources) == [3, 5]
    assert len(tokens) == 40 and tokens == prompt.answer_tokens(40)
    assert "".join(tokens).startswith("摘要：如何退款[3]。") and "[5]" in tokens
    english = Prompt.from_responses_input(
        [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi there"}]}], "sys"
    )
    assert not english.chinese and english.answer_tokens(3) == ["Summary:", " Hi", " there"]


def test_embeddings_are_unit_and_deterministic() -> None:
    first, again, other = embed("alpha beta", 32), embed("alpha beta", 32), embed("", 32)
    assert first == again and len(other) == 32
    assert sum(x * x for x in first) == pytest.approx(1.0) and sum(x * x for x in other) == pytest.approx(1.0)


# -- faults ---------------------------------------------------------------------------------------------


def test_config_updates_are_validated_as_the_flags_are() -> None:
    config = SimulatorConfig(tpot_ms=10, output_tokens=64)
    updated = config.updated({"tpot_ms": 2, "output_tokens": "12", "max_num_seqs": 4.0, "model": "other"})
    assert (updated.tpot_ms, updated.output_tokens, updated.max_num_seqs, updated.model) == (2.0, 12, 4, "other")
    assert (config.tpot_ms, config.output_tokens) == (10, 64)  # a copy: the old one is unchanged
    bad: list[tuple[dict[str, Any], str]] = [
        ({"tpot_ms": -1}, "tpot_ms"),
        ({"ttft_ms": float("nan")}, "ttft_ms"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"output_tokens": 1.5}, "output_tokens"),
        ({"embedding_dim": True}, "embedding_dim"),
        ({"model": " "}, "model"),
        ({"model": 3}, "model"),
        ({"rate_429": 1}, "rate_429"),  # a fault: /admin/faults
        ({"port": 80}, "port"),
        ({"output_tokens": 3, "reasoning_tokens": -1}, "reasoning_tokens"),
    ]
    for changes, field in bad:
        with pytest.raises(ConfigError) as caught:
            config.updated(changes)
        assert caught.value.field == field, changes


def test_directives_and_fault_updates() -> None:
    assert parse_directive("429") == ("429", [])
    assert parse_directive("stall:3:1.5") == ("stall", [3.0, 1.5])
    for bad in ("200", "drop:1:2", "explode", "hang:-1"):
        with pytest.raises(ValueError):
            parse_directive(bad)
    faults = FaultConfig().updated({"fail_next": "429,drop:4", "stall_after": 2, "retry_after": 5.0})
    assert faults.fail_next == ["429", "drop:4"] and faults.retry_after == 5 and faults.stall_after == 2
    with pytest.raises(ConfigError) as caught:
        FaultConfig().updated({"rate_500": True})
    assert caught.value.flag == "--rate-500"


def test_injector_consumes_fail_next_for_target_endpoints_only() -> None:
    injector = FaultInjector(FaultConfig(fail_next=["500", "stall", "ok", "hang:2"], stall_after=7), seed=0)
    assert injector.decide("embeddings") == FaultPlan()
    assert injector.decide("chat").status == 500
    assert injector.decide("responses").stall_after == 7
    assert injector.decide("chat") == FaultPlan()
    assert injector.decide("chat").hang_seconds == 2.0
    injector.reset()
    assert injector.config.fail_next == ["500", "stall", "ok", "hang:2"]


# -- the ASGI app in process ----------------------------------------------------------------------------


class FakeRequest:
    """Drives the app like a server: one body message, then http.disconnect when told to."""

    def __init__(self, app: Any, method: str, path: str, body: Any = None, extensions: Any = None) -> None:
        self.app = app
        self.scope = {"type": "http", "method": method, "path": path, "headers": [], "extensions": extensions}
        self.body = json.dumps(body).encode() if body is not None else b""
        self.sent: list[dict[str, Any]] = []
        self.gone = asyncio.Event()
        self._body_read = False

    async def receive(self) -> dict[str, Any]:
        if not self._body_read:
            self._body_read = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def start(self) -> asyncio.Task[None]:
        return asyncio.create_task(self.app(self.scope, self.receive, self.send))

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def text(self) -> str:
        return b"".join(m.get("body", b"") for m in self.sent[1:]).decode()


STREAM = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def test_app_routes_and_validation() -> None:
    app = build_app(SimulatorConfig(ttft_ms=0, tpot_ms=0))
    cases: list[tuple[str, str, Any, int]] = [
        ("GET", "/nope", None, 404),
        ("GET", "/v1/chat/completions", None, 405),
        ("POST", "/v1/chat/completions", {"messages": []}, 400),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "n": 2}, 400),
        ("POST", "/v1/responses", {"input": "x", "max_output_tokens": 0}, 400),
        ("POST", "/v1/embeddings", {"input": "x", "encoding_format": "hex"}, 400),
        ("GET", "/health", None, 200),
    ]
    for method, path, body, status in cases:
        request = FakeRequest(app, method, path, body)
        await request.start()
        assert request.status == status, (path, body, request.text)
    assert app.engine.snapshot()["status"] == {"400": 4}


async def test_queue_full_disconnect_and_drop_in_process() -> None:
    app = build_app(SimulatorConfig(max_num_seqs=1, max_waiting=1, ttft_ms=0, tpot_ms=50, output_tokens=100))
    running, waiting, refused = (FakeRequest(app, "POST", "/v1/chat/completions", STREAM) for _ in range(3))
    tasks = [running.start(), waiting.start()]
    await until(lambda: (app.engine.scheduler.running, app.engine.scheduler.waiting) == (1, 1))
    await refused.start()
    assert refused.status == 503 and (app.engine.scheduler.running, app.engine.scheduler.waiting) == (1, 1)
    running.gone.set()
    waiting.gone.set()
    await asyncio.gather(*tasks)
    assert app.engine.snapshot()["aborted"] == 2 and app.engine.scheduler.running == 0

    app.engine.faults.update({"fail_next": ["drop:1", "drop:1"]})
    aborted: list[bool] = []
    hooked = FakeRequest(
        app, "POST", "/v1/chat/completions", STREAM, {ABORT_EXTENSION: {"abort": lambda: aborted.append(True)}}
    )
    await hooked.start()
    assert aborted == [True] and "[DONE]" not in hooked.text
    with pytest.raises(ConnectionDropped):  # no hook: the exception makes a generic server close the socket
        await FakeRequest(app, "POST", "/v1/chat/completions", STREAM).start()
    assert app.engine.snapshot()["dropped"] == 2
