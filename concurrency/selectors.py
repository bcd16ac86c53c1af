"""Reads: the settings row, and the stats of this worker and of every worker (for the APIs and the console)."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

from concurrency.live import SettingsSnapshot, settings_current, worker_id, worker_stats, workers_read
from concurrency.live.stored import (
    concurrency_settings_defaults,
    concurrency_settings_get,
    concurrency_settings_snapshot,
    concurrency_settings_version,
    settings_snapshot_of,
)
from concurrency.live.workers import redis_config
from concurrency.models import BACKENDS

__all__ = [
    "EnvironmentDifference",
    "auxiliary_skipped_summary",
    "concurrency_priority",
    "concurrency_settings_defaults",
    "concurrency_settings_env_differences",
    "concurrency_settings_get",
    "concurrency_settings_snapshot",
    "concurrency_settings_version",
    "concurrency_status",
    "concurrency_summary",
    "concurrency_workers",
    "seed_backends",
    "settings_snapshot_of",
    "workers_summary",
]

# The keys of a backend in the seed's API (scripts such as `jq .chat.in_progress` read them at the top level).
SEED_BACKEND_KEYS = (
    "limit",
    "available",
    "in_progress",
    "waiting",
    "total_acquired",
    "total_released",
    "total_timeout",
)
# Summed over workers; the wait percentiles are not additive, so the summary keeps their maximum.
_SUMMED = (*SEED_BACKEND_KEYS, "total_rejected")
_MAXED = ("wait_ms_p50", "wait_ms_p95", "wait_ms_p99", "max_wait_ms")


# The variables each field of the row is seeded from; a field counts as set by the environment when one of them is.
ENVIRONMENT_VARIABLES: dict[str, tuple[str, ...]] = {
    "limit_default": ("LLM_MAX_CONCURRENT_DEFAULT",),
    "limit_chat": ("LLM_MAX_CONCURRENT_CHAT", "LLM_MAX_CONCURRENT_DEFAULT"),
    "limit_responses": ("LLM_MAX_CONCURRENT_RESPONSES", "LLM_MAX_CONCURRENT_DEFAULT"),
    "limit_embedding": ("LLM_MAX_CONCURRENT_EMBEDDING",),
    "priority_enabled": ("LLM_PRIORITY_ENABLED",),
    "starvation_threshold": ("LLM_PRIORITY_STARVATION_THRESHOLD",),
    "acquire_timeout": ("LLM_ACQUIRE_TIMEOUT",),
    "max_waiters": ("LLM_MAX_WAITERS",),
    **{f"rpm_{backend}": ("LLM_RPM_LIMIT",) for backend in BACKENDS},
    "retry_max_attempts": ("LLM_RETRY_MAX_ATTEMPTS",),
    "retry_base_seconds": ("LLM_RETRY_BASE_SECONDS",),
    "retry_max_seconds": ("LLM_RETRY_MAX_SECONDS",),
    "llm_request_timeout": ("LLM_REQUEST_TIMEOUT",),
    "telemetry_sample_rate": ("LANGFUSE_SAMPLE_RATE",),
}


@dataclass(frozen=True, slots=True)
class EnvironmentDifference:
    """A field of the saved settings row that differs from what the environment sets it to."""

    field: str
    variable: str  # the variable that sets it (the first of ENVIRONMENT_VARIABLES[field] that is set)
    environment: int | float | bool
    saved: int | float | bool

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "variable": self.variable, "environment": self.environment, "saved": self.saved}

    def __str__(self) -> str:
        return f"{self.variable}={self.environment} (saved: {self.saved})"


def _snapshot_value(snapshot: SettingsSnapshot, field: str) -> int | float | bool:
    if field.startswith("limit_"):
        return snapshot.limits.get(field.removeprefix("limit_"), 0)
    if field.startswith("rpm_"):
        return snapshot.rpm.get(field.removeprefix("rpm_"), 0)
    value: int | float | bool = getattr(snapshot, field)
    return value


def concurrency_settings_env_differences(*, snapshot: SettingsSnapshot) -> list[EnvironmentDifference]:
    """The fields where the environment (variables actually set, in the process or `.env`) says one thing and the
    saved settings, which win, another. A variable left unset says nothing: the console's edits are not
    differences from the built-in defaults."""
    environment = concurrency_settings_defaults()
    out: list[EnvironmentDifference] = []
    for field, variables in ENVIRONMENT_VARIABLES.items():
        variable = next((name for name in variables if os.environ.get(name, "").strip()), None)
        if variable is None:
            continue
        wanted, saved = environment[field], _snapshot_value(snapshot, field)
        same = wanted == saved if isinstance(wanted, bool) else math.isclose(float(wanted), float(saved))
        if not same:
            out.append(EnvironmentDifference(field, variable, wanted, saved))
    return out


# ------------------------------------------------------------------------------------------------ stats


def concurrency_workers() -> list[dict[str, Any]]:
    """Every live worker's stats: those published to Redis, with this worker's replaced by fresh local ones
    (so it is listed even before its first publish). Without Redis: just this worker."""
    local = worker_stats()
    others = [w for w in workers_read() if w.get("worker_id") != local["worker_id"]]
    return sorted([local, *others], key=lambda w: str(w["worker_id"]))


def workers_summary(workers: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per backend over ``workers``: counters and gauges summed, wait percentiles as their maximum. With
    cluster-wide limits (``manager.cluster`` in a worker's stats) the limit is the cluster's, not a sum, and what
    is available is that limit less every worker's calls in progress."""
    summary: dict[str, dict[str, Any]] = {}
    cluster_limits: dict[str, int] = {}
    for worker in workers:
        manager = worker.get("manager") or {}
        for backend, stats in manager.get("backends", {}).items():
            row = summary.setdefault(backend, {**dict.fromkeys(_SUMMED, 0), **dict.fromkeys(_MAXED, 0.0)})
            for key in _SUMMED:
                row[key] += int(stats.get(key, 0))
            for key in _MAXED:
                row[key] = max(row[key], float(stats.get(key, 0.0)))
            if manager.get("cluster"):
                cluster_limits[backend] = max(cluster_limits.get(backend, 0), int(stats.get("limit", 0)))
    for backend, row in summary.items():
        row["workers"] = len(workers)
        row["scope"] = "cluster" if backend in cluster_limits else "worker"
        if backend in cluster_limits:
            row["limit"] = cluster_limits[backend]
            row["available"] = max(0, row["limit"] - row["in_progress"])
    return summary


def auxiliary_skipped_summary(workers: list[dict[str, Any]]) -> dict[str, int]:
    """Auxiliary LLM calls (planner, summary...) skipped for want of a slot, per kind, summed over ``workers``."""
    skipped: dict[str, int] = {}
    for worker in workers:
        for kind, count in ((worker.get("manager") or {}).get("auxiliary_skipped") or {}).items():
            skipped[kind] = skipped.get(kind, 0) + int(count)
    return dict(sorted(skipped.items()))


def _settings_payload() -> dict[str, Any]:
    """The settings this worker applied (or the row, before the first apply)."""
    current = settings_current()
    snapshot = current if current is not None else concurrency_settings_snapshot()
    return {
        **snapshot.to_dict(),
        "applied": current is not None,
        # what the environment sets otherwise (the saved settings win): `manage.py concurrency_settings --from-env`
        "environment_differences": [d.as_dict() for d in concurrency_settings_env_differences(snapshot=snapshot)],
    }


def seed_backends(summary: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Each backend's seed keys (summed over workers), as the seed's APIs return them."""
    return {backend: {key: int(row.get(key, 0)) for key in SEED_BACKEND_KEYS} for backend, row in summary.items()}


def concurrency_status() -> dict[str, Any]:
    """GET /api/v1/admin/concurrency/status: the seed's shape, each backend at the top level summed over workers
    (`{"chat": {"limit", "available", "in_progress", ...}, ...}`); beside them this worker in full, the settings,
    every worker and the full sums (wait percentiles, rejections) under `summary`; the auxiliary calls skipped for
    want of a slot, per kind and summed over workers, under `auxiliary_skipped`."""
    workers = concurrency_workers()
    local = next(w for w in workers if w["worker_id"] == worker_id())
    summary = workers_summary(workers)
    return {
        **seed_backends(summary),
        "worker": local,
        "settings": _settings_payload(),
        "redis": bool(redis_config()[0]),
        # With cluster-wide limits: Redis's view of the whole cluster (state, live workers, permits per worker).
        "cluster": local["manager"].get("cluster"),
        "workers": workers,
        "summary": summary,
        "auxiliary_skipped": auxiliary_skipped_summary(workers),
        "server_time": time.time(),
    }


def concurrency_summary() -> dict[str, Any]:
    """GET /api/v1/admin/concurrency/summary: the seed's `total_in_progress`, `total_waiting` and `by_backend`
    (each backend's seed keys), summed over workers; the full sums per backend under `backends`."""
    workers = concurrency_workers()
    summary = workers_summary(workers)
    return {
        "total_in_progress": sum(int(row["in_progress"]) for row in summary.values()),
        "total_waiting": sum(int(row["waiting"]) for row in summary.values()),
        "by_backend": seed_backends(summary),
        "workers": [w["worker_id"] for w in workers],
        "backends": summary,
        "server_time": time.time(),
    }


def concurrency_priority(*, queue_head: int = 10) -> dict[str, Any]:
    """GET /api/v1/admin/concurrency/priority: the seed's `priority_enabled`, `starvation_threshold` and `queues`
    (per backend: how many wait over all workers, and the queue heads of each worker, in the order that worker
    would serve them); `mode` beside them."""
    local = worker_stats(queue_head=queue_head)
    others = [w for w in workers_read() if w.get("worker_id") != local["worker_id"]]
    manager = local["manager"]
    queues: dict[str, dict[str, Any]] = {}
    for worker in sorted([local, *others], key=lambda w: str(w["worker_id"])):
        for backend, stats in (worker.get("manager") or {}).get("backends", {}).items():
            row = queues.setdefault(backend, {"waiting": 0, "queue_head": []})
            row["waiting"] += int(stats.get("waiting", 0))
            row["queue_head"] += [{**entry, "worker_id": worker["worker_id"]} for entry in stats.get("queue_head", [])]
    return {
        "priority_enabled": manager["mode"] == "priority",
        "starvation_threshold": manager["starvation_threshold"],
        "queues": queues,
        "mode": manager["mode"],
        "server_time": time.time(),
    }
