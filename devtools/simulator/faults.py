"""Per-request fault decisions: the deterministic fail_next queue first, then the seeded random rates."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from devtools.simulator.config import FaultConfig, parse_directive

# Used when a fail_next "stall"/"drop" directive gives no K and the config has none either.
DEFAULT_FAULT_AFTER_TOKENS = 2


@dataclass(frozen=True)
class FaultPlan:
    """What goes wrong with one request. All None means nothing does."""

    status: int | None = None
    retry_after: int | None = None
    hang_seconds: float | None = None  # 0 = until the client goes away
    stall_after: int | None = None
    stall_seconds: float = 0.0
    drop_after: int | None = None

    @property
    def name(self) -> str:
        if self.status is not None:
            return str(self.status)
        for kind in ("hang_seconds", "stall_after", "drop_after"):
            if getattr(self, kind) is not None:
                return kind.split("_")[0]
        return "ok"


class FaultInjector:
    def __init__(self, initial: FaultConfig, seed: int) -> None:
        self._initial = initial.copy()
        self._seed = seed
        self.reset()

    def reset(self) -> None:
        self.config = self._initial.copy()
        self._rng = random.Random(self._seed)

    def reseed(self, seed: int) -> None:
        """Draw the rates from ``seed`` from now on; ``reset`` returns to the start-up seed."""
        self._rng = random.Random(seed)

    def update(self, changes: dict[str, object]) -> FaultConfig:
        self.config = self.config.updated(changes)
        return self.config

    def decide(self, endpoint: str) -> FaultPlan:
        config = self.config
        if endpoint not in config.endpoints:
            return FaultPlan()
        if config.fail_next:
            return self._directive(config.fail_next.pop(0))
        # Draw every rate on every request so one rate's setting does not shift another's random sequence.
        draws = [self._rng.random() for _ in range(5)]
        if draws[0] < config.rate_429:
            return FaultPlan(status=429, retry_after=config.retry_after)
        if draws[1] < config.rate_500:
            return FaultPlan(status=500)
        if draws[2] < config.hang_rate:
            return FaultPlan(hang_seconds=config.hang_seconds)
        stall = config.stall_after is not None and draws[3] < config.stall_rate
        drop = config.drop_after is not None and draws[4] < config.drop_rate
        return FaultPlan(
            stall_after=config.stall_after if stall else None,
            stall_seconds=config.stall_seconds,
            drop_after=config.drop_after if drop else None,
        )

    def _directive(self, raw: str) -> FaultPlan:
        config = self.config
        kind, args = parse_directive(raw)
        if kind.isdigit():
            status = int(kind)
            return FaultPlan(status=status, retry_after=config.retry_after if status == 429 else None)
        if kind == "hang":
            return FaultPlan(hang_seconds=args[0] if args else config.hang_seconds)
        if kind == "stall":
            return FaultPlan(
                stall_after=int(args[0]) if args else _after(config.stall_after),
                stall_seconds=args[1] if len(args) > 1 else config.stall_seconds,
            )
        if kind == "drop":
            return FaultPlan(drop_after=int(args[0]) if args else _after(config.drop_after))
        return FaultPlan()


def _after(configured: int | None) -> int:
    return DEFAULT_FAULT_AFTER_TOKENS if configured is None else configured


# llama-cpp-python's answer to a json_schema response_format: its pydantic validation error, as HTTP 500.
_LLAMA_CPP_FORMAT_ERROR = (
    "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
    "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}]"
)


def _format_type(endpoint: str, body: Mapping[str, Any]) -> str | None:
    if endpoint == "chat":
        response_format = body.get("response_format")
        return response_format.get("type") if isinstance(response_format, dict) else None
    text = body.get("text")
    text_format = text.get("format") if isinstance(text, dict) else None
    return text_format.get("type") if isinstance(text_format, dict) else None


def capability_refusal(endpoint: str, body: Mapping[str, Any], refuse: Sequence[str]) -> tuple[int, str] | None:
    """(status, message) when a server lacking the capabilities in ``refuse`` (FaultConfig.refuse) would refuse
    this request, else None."""
    if endpoint == "responses" and "responses" in refuse:
        return 404, "Not Found"
    if endpoint not in ("chat", "responses"):
        return None
    kind = _format_type(endpoint, body)
    if kind == "json_schema" and "json_schema" in refuse:
        return 500, _LLAMA_CPP_FORMAT_ERROR
    if kind == "json_object" and "json_object" in refuse:
        where = "response_format" if endpoint == "chat" else "text.format"
        return 400, f"{where}: only 'text' is supported"
    if body.get("stream_options") is not None and "stream_options" in refuse:
        return 400, "Unrecognized request argument supplied: stream_options"
    return None
