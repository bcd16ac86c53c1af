"""The simulated engine: shared state, what a request will generate, and the paced decode loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from devtools.simulator.asgi_io import dumps
from devtools.simulator.config import SimulatorConfig
from devtools.simulator.faults import FaultInjector, FaultPlan
from devtools.simulator.scheduler import Scheduler, TimingModel
from devtools.simulator.schema import instance_for_schema
from devtools.simulator.stats import Stats
from devtools.simulator.text import Prompt, chunk_text

TokenKind = Literal["reasoning", "content"]
Emit = Callable[[TokenKind, str], Awaitable[None]]


class StreamDropped(Exception):
    """The fault plan says: close the connection here, without the terminating chunk."""


class Engine:
    """Everything one simulated server shares across requests."""

    def __init__(self, config: SimulatorConfig) -> None:
        self._initial = config
        self.config = config
        self.scheduler = Scheduler(config.max_num_seqs, config.max_waiting)
        self.timing = TimingModel(config, self.scheduler)
        self.stats = Stats()
        self.faults = FaultInjector(config.faults, config.seed)

    def configure(self, changes: Mapping[str, Any]) -> SimulatorConfig:
        """Apply validated ``changes`` (SimulatorConfig fields but the faults) to the requests that start from now
        on; one already started keeps its timing and length. Raises ConfigError, changing nothing, on a bad one."""
        config = self.config.updated(changes)
        self._apply(config)
        if "seed" in changes:
            self.faults.reseed(config.seed)
        return config

    def reset(self) -> None:
        """Zero the counters and return to the start-up configuration and faults (the RNG reseeded)."""
        self.stats.reset()
        self.faults.reset()
        self._apply(self._initial)

    def _apply(self, config: SimulatorConfig) -> None:
        self.config = config
        self.scheduler.resize(config.max_num_seqs, config.max_waiting)
        self.timing = TimingModel(config, self.scheduler)

    def snapshot(self) -> dict[str, Any]:
        return self.stats.snapshot(running=self.scheduler.running, waiting=self.scheduler.waiting)

    def prometheus(self) -> str:
        return self.stats.prometheus(
            model=self.config.model,
            running=self.scheduler.running,
            waiting=self.scheduler.waiting,
            max_num_seqs=self.config.max_num_seqs,
        )


@dataclass(frozen=True)
class Generation:
    """The tokens one request will produce, decided before it is scheduled."""

    prompt_tokens: int
    reasoning: list[str]
    content: list[str]
    finish_reason: Literal["stop", "length"]

    @property
    def completion_tokens(self) -> int:
        return len(self.reasoning) + len(self.content)

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)

    @property
    def content_text(self) -> str:
        return "".join(self.content)


def plan_generation(
    config: SimulatorConfig,
    prompt: Prompt,
    *,
    max_tokens: int | None,
    schema: Mapping[str, Any] | None,
    reasoning: bool = True,
) -> Generation:
    """Decide the output. max_tokens caps reasoning plus answer, as in vLLM; a JSON answer is never cut,
    because a truncated document would test nothing but the truncation."""
    budget = max_tokens
    reasoning_count = config.reasoning_tokens if reasoning else 0
    if budget is not None:
        reasoning_count = min(reasoning_count, budget)
    reasoning_tokens = prompt.reasoning_tokens(reasoning_count)
    if schema is not None:
        summary = "".join(prompt.answer_tokens(12)).strip()
        document = instance_for_schema(schema, question=prompt.topic, summary=summary, chinese=prompt.chinese)
        return Generation(prompt.prompt_tokens, reasoning_tokens, chunk_text(dumps(document)), "stop")
    target = config.output_tokens or (max_tokens if max_tokens is not None else config.default_max_tokens)
    finish: Literal["stop", "length"] = "stop"
    if budget is not None and reasoning_count + target > budget:
        target = budget - reasoning_count
        finish = "length"
    return Generation(prompt.prompt_tokens, reasoning_tokens, prompt.answer_tokens(target), finish)


async def hang(seconds: float) -> None:
    """Sleep ``seconds``; 0 means until cancelled (the client going away cancels the request)."""
    if seconds > 0:
        await asyncio.sleep(seconds)
    else:
        await asyncio.Event().wait()


async def decode(engine: Engine, generation: Generation, plan: FaultPlan, emit: Emit, *, arrival: float) -> None:
    """Wait for a slot, prefill, then emit one token per step; faults act at their token index.

    Each token's time is computed against an absolute deadline so the per-token overhead of sending does
    not accumulate into a slower stream than configured; the step length is re-read every token because
    it depends on how many sequences are running right now.
    """
    loop = asyncio.get_running_loop()
    timing = engine.timing  # the configuration when the request started, whatever /admin/config does meanwhile
    async with engine.scheduler.slot():
        if plan.hang_seconds is not None:
            await hang(plan.hang_seconds)
        await asyncio.sleep(timing.prefill_seconds(generation.prompt_tokens))
        deadline = loop.time()
        tokens: list[tuple[TokenKind, str]] = [("reasoning", t) for t in generation.reasoning]
        tokens += [("content", t) for t in generation.content]
        for index, (kind, token) in enumerate(tokens):
            if plan.drop_after == index:
                raise StreamDropped
            if plan.stall_after == index:
                await asyncio.sleep(plan.stall_seconds)
                deadline = loop.time()
            if index:
                deadline += timing.tpot_seconds()
                await asyncio.sleep(max(deadline - loop.time(), 0.0))
            await emit(kind, token)
            if index == 0:
                engine.stats.ttft.observe(loop.time() - arrival)
        if plan.drop_after is not None and plan.drop_after >= len(tokens):
            raise StreamDropped
