"""Configuration of the simulator: engine shape, timing model and fault injection.

Field names match the command-line flags (``rate_429`` <-> ``--rate-429``) so a validation error can name
the flag the operator typed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Endpoints that faults can target. Embeddings are left out by default because a vLLM embedding model is
# usually a separate server and a chat test should not lose its queued fault to an embedding call.
FAULT_ENDPOINTS = ("chat", "responses", "embeddings")
DEFAULT_FAULT_ENDPOINTS = ("chat", "responses")

# fail_next directives besides HTTP status codes; see FaultConfig.
STREAM_DIRECTIVES = ("ok", "hang", "stall", "drop")

# What a less capable OpenAI-compatible server refuses or lacks (FaultConfig.refuse), as llama.cpp's server does:
# structured output as json_schema (HTTP 500 "Input should be 'text' or 'json_object'"), as json_object too,
# stream_options (HTTP 400), the whole Responses API (404), and usage in streams (silently: none is sent).
REFUSABLE = ("json_schema", "json_object", "stream_options", "responses", "stream_usage")


class ConfigError(ValueError):
    """A bad setting; ``field`` is the dataclass field (and, with dashes, the command-line flag)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")


def _require(condition: bool, field_name: str, message: str) -> None:
    if not condition:
        raise ConfigError(field_name, message)


def _probability(value: float, field_name: str) -> None:
    _require(math.isfinite(value) and 0.0 <= value <= 1.0, field_name, f"must be in [0, 1], got {value}")


def _non_negative(value: float, field_name: str) -> None:
    _require(math.isfinite(value) and value >= 0, field_name, f"must be >= 0, got {value}")


def parse_directive(raw: str) -> tuple[str, list[float]]:
    """Split one fail_next entry: ``"429"``, ``"hang"``, ``"hang:2"``, ``"stall:3:1.5"``, ``"drop:4"``.

    Returns (kind, numeric arguments). Raises ValueError on anything else, so a typo in a test fails loudly
    instead of silently doing nothing.
    """
    kind, *args = str(raw).strip().lower().split(":")
    if kind.isdigit():
        status = int(kind)
        if not 400 <= status <= 599 or args:
            raise ValueError(f"status directive must be a bare 4xx/5xx code, got {raw!r}")
        return kind, []
    max_args = {"ok": 0, "hang": 1, "stall": 2, "drop": 1}
    if kind not in max_args or len(args) > max_args[kind]:
        raise ValueError(f"unknown fail_next directive {raw!r}")
    numbers = [float(a) for a in args]
    if any(not math.isfinite(n) or n < 0 for n in numbers):
        raise ValueError(f"fail_next directive arguments must be >= 0: {raw!r}")
    return kind, numbers


@dataclass
class FaultConfig:
    """Faults, changeable at run time through ``POST /admin/faults``.

    Rates are per-request probabilities drawn from the seeded RNG. ``fail_next`` is a FIFO of directives
    consumed one per request (before any rate is drawn): an HTTP status (``"429"``, ``"500"``, ``"503"``),
    ``"hang[:S]"``, ``"stall[:K[:S]]"``, ``"drop[:K]"`` or ``"ok"`` (no fault; useful as a spacer).
    """

    rate_429: float = 0.0
    retry_after: int = 1
    rate_500: float = 0.0
    # Hang: the stream is opened (headers sent) but no token follows. 0 seconds = until the client leaves.
    hang_rate: float = 0.0
    hang_seconds: float = 0.0
    # Stall: after K tokens, nothing for S seconds, then the stream resumes.
    stall_after: int | None = None
    stall_seconds: float = 2.0
    stall_rate: float = 1.0
    # Drop: after K tokens the TCP connection is closed without the terminating chunk.
    drop_after: int | None = None
    drop_rate: float = 1.0
    fail_next: list[str] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=lambda: list(DEFAULT_FAULT_ENDPOINTS))
    # Capabilities this server lacks (REFUSABLE), on every request until changed: unlike the faults above, not
    # drawn per request.
    refuse: list[str] = field(default_factory=list)

    def validate(self) -> None:
        for name in ("rate_429", "rate_500", "hang_rate", "stall_rate", "drop_rate"):
            _probability(float(getattr(self, name)), name)
        _require(
            isinstance(self.retry_after, int) and self.retry_after >= 0,
            "retry_after",
            f"must be an integer >= 0, got {self.retry_after}",
        )
        for name in ("hang_seconds", "stall_seconds"):
            _non_negative(float(getattr(self, name)), name)
        for name in ("stall_after", "drop_after"):
            value = getattr(self, name)
            _require(
                value is None or (isinstance(value, int) and value >= 0),
                name,
                f"must be an integer >= 0, got {value}",
            )
        for entry in self.fail_next:
            try:
                parse_directive(entry)
            except ValueError as exc:
                raise ConfigError("fail_next", str(exc)) from None
        for endpoint in self.endpoints:
            _require(endpoint in FAULT_ENDPOINTS, "endpoints", f"unknown endpoint {endpoint!r}")
        for capability in self.refuse:
            _require(capability in REFUSABLE, "refuse", f"unknown capability {capability!r} (known: {REFUSABLE})")

    def updated(self, changes: Mapping[str, Any]) -> FaultConfig:
        """A validated copy with ``changes`` applied (JSON from /admin/faults). Unknown keys are errors."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ConfigError(unknown[0], f"unknown fault field (known: {', '.join(sorted(known))})")
        coerced: dict[str, Any] = {}
        for key, value in changes.items():
            coerced[key] = _coerce_fault_value(key, value)
        new = dataclasses.replace(self, **coerced)
        new.validate()
        return new

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def copy(self) -> FaultConfig:
        return dataclasses.replace(
            self, fail_next=list(self.fail_next), endpoints=list(self.endpoints), refuse=list(self.refuse)
        )


def _coerce_fault_value(key: str, value: Any) -> Any:
    # JSON has no int/float distinction worth trusting, and bool is an int subclass: reject it explicitly.
    if isinstance(value, bool):
        raise ConfigError(key, "must be a number, not a boolean")
    try:
        if key in ("fail_next", "endpoints", "refuse"):
            if isinstance(value, str):
                value = [v for v in value.split(",") if v.strip()]
            if not isinstance(value, list):
                raise ConfigError(key, "must be a list of strings")
            return [str(v).strip() for v in value]
        if key in ("stall_after", "drop_after"):
            return None if value is None else _as_int(value)
        if key == "retry_after":
            return _as_int(value)
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(key, f"bad value {value!r}") from None


def _as_int(value: Any) -> int:
    number = float(value)
    if not number.is_integer():
        raise ValueError(value)
    return int(number)


@dataclass
class SimulatorConfig:
    """Everything the simulated server needs; ``build_app(config)`` serves it."""

    model: str = "sim-llm"
    embedding_model: str = "sim-embedding"
    # Scheduler: at most max_num_seqs sequences decode at once; the rest wait FIFO, up to max_waiting
    # (vLLM's queue is unbounded, so the default bound is only a guard against runaway load tests).
    max_num_seqs: int = 16
    max_waiting: int = 100_000
    # Timing: prefill = (ttft_ms + prefill_ms_per_token * prompt_tokens) * slowdown, each further token
    # tpot_ms * slowdown, where slowdown = 1 + batch_slowdown * (running - 1) / max_num_seqs.
    ttft_ms: float = 50.0
    prefill_ms_per_token: float = 0.0
    tpot_ms: float = 10.0
    batch_slowdown: float = 1.0
    # Answer length in tokens; the request's max_tokens caps it. 0 = exactly the request's max_tokens
    # (or default_max_tokens when the request has none).
    output_tokens: int = 64
    default_max_tokens: int = 256
    reasoning_tokens: int = 0
    embedding_dim: int = 384
    seed: int = 0
    faults: FaultConfig = field(default_factory=FaultConfig)

    def validate(self) -> None:
        _require(bool(self.model.strip()), "model", "must not be empty")
        _require(bool(self.embedding_model.strip()), "embedding_model", "must not be empty")
        for name in ("max_num_seqs", "max_waiting", "default_max_tokens", "embedding_dim"):
            value = getattr(self, name)
            _require(isinstance(value, int) and value >= 1, name, f"must be an integer >= 1, got {value}")
        for name in ("output_tokens", "reasoning_tokens"):
            value = getattr(self, name)
            _require(isinstance(value, int) and value >= 0, name, f"must be an integer >= 0, got {value}")
        for name in ("ttft_ms", "prefill_ms_per_token", "tpot_ms", "batch_slowdown"):
            _non_negative(float(getattr(self, name)), name)
        self.faults.validate()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def engine_settings(self) -> dict[str, Any]:
        """What ``GET /admin/config`` shows: every field but the faults, which have ``/admin/faults``."""
        return {name: getattr(self, name) for name in RUNTIME_FIELDS}

    def updated(self, changes: Mapping[str, Any]) -> SimulatorConfig:
        """A validated copy with ``changes`` applied (JSON from ``POST /admin/config``); unknown keys and faults
        are errors naming the field."""
        coerced: dict[str, Any] = {}
        for key, value in changes.items():
            if key == "faults" or key in _FAULT_FIELDS:
                raise ConfigError(key, "is a fault: set it through /admin/faults")
            if key not in RUNTIME_FIELDS:
                raise ConfigError(key, f"unknown config field (known: {', '.join(RUNTIME_FIELDS)})")
            coerced[key] = _coerce_config_value(key, value)
        new = dataclasses.replace(self, faults=self.faults.copy(), **coerced)
        new.validate()
        return new


# The fields ``POST /admin/config`` may change while the simulator runs: all of SimulatorConfig but its faults.
RUNTIME_FIELDS = tuple(f.name for f in dataclasses.fields(SimulatorConfig) if f.name != "faults")
_FAULT_FIELDS = frozenset(f.name for f in dataclasses.fields(FaultConfig))
_TEXT_FIELDS = frozenset({"model", "embedding_model"})
_INT_FIELDS = frozenset(
    {"max_num_seqs", "max_waiting", "output_tokens", "default_max_tokens", "reasoning_tokens", "embedding_dim", "seed"}
)


def _coerce_config_value(key: str, value: Any) -> Any:
    """JSON to the field's type; ``validate`` then applies the command line's rules to the result."""
    if key in _TEXT_FIELDS:
        if not isinstance(value, str):
            raise ConfigError(key, f"must be a string, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(key, f"must be a number, got {value!r}")
    try:
        return _as_int(value) if key in _INT_FIELDS else float(value)
    except (TypeError, ValueError):
        raise ConfigError(key, f"bad value {value!r}") from None
