"""An immutable copy of the settings row: what travels over Redis and what ``on_settings_applied`` callbacks get.

Pure Python (no Django), so the pipeline can read it without touching the ORM.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["SettingsSnapshot"]


@dataclass(frozen=True, slots=True)
class SettingsSnapshot:
    version: int
    limits: dict[str, int]
    priority_enabled: bool
    starvation_threshold: float
    acquire_timeout: float
    max_waiters: int
    # Requests per minute per backend; 0 = unlimited.
    rpm: dict[str, int] = field(default_factory=dict)
    retry_max_attempts: int = 8
    retry_base_seconds: float = 1.0
    retry_max_seconds: float = 60.0
    llm_request_timeout: float = 120.0
    telemetry_sample_rate: float = 1.0
    updated_at: str | None = None  # ISO 8601
    updated_by: str | None = None  # username

    def manager_options(self) -> dict[str, Any]:
        """Keyword arguments of ``LLMConcurrencyManager.configure`` (the part of the settings it owns)."""
        return {
            "limits": dict(self.limits),
            "priority_enabled": self.priority_enabled,
            "starvation_threshold": self.starvation_threshold,
            "acquire_timeout": self.acquire_timeout,
            "max_waiters": self.max_waiters,
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SettingsSnapshot:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**known)

    @classmethod
    def from_json(cls, raw: str | bytes) -> SettingsSnapshot:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("a settings snapshot must be a JSON object")
        return cls.from_dict(data)
