"""Live LLM concurrency settings: every worker applies a saved change within a second, and reports its stats.

Public API:

- ``live_settings_start()`` / ``live_settings_stop()``: the one background task per process, ``live_settings_task``
  (started by ``infra.worker_tasks.WorkerTasksMiddleware`` on the first ASGI connection);
  ``live_settings_preload()`` applies the stored row at server start-up, before that.
- ``on_settings_applied(fn)``: ``fn(SettingsSnapshot)`` after each applied change (rpm, retries, sample rate).
- ``register_stats_provider(name, fn)``: extra per-worker stats shown in the console.
- ``worker_stats()`` / ``workers_read()``: this worker's stats; every live worker's, from Redis.
"""

from __future__ import annotations

from .apply import on_settings_applied, settings_apply, settings_apply_soon, settings_current, settings_forget
from .runner import (
    LiveSettingsRunner,
    live_settings_enabled,
    live_settings_preload,
    live_settings_running,
    live_settings_start,
    live_settings_stop,
    live_settings_task,
)
from .snapshot import SettingsSnapshot
from .workers import (
    redis_config,
    register_stats_provider,
    settings_publish,
    worker_id,
    worker_stats,
    workers_read,
)

__all__ = [
    "LiveSettingsRunner",
    "SettingsSnapshot",
    "live_settings_enabled",
    "live_settings_preload",
    "live_settings_running",
    "live_settings_start",
    "live_settings_stop",
    "live_settings_task",
    "on_settings_applied",
    "redis_config",
    "register_stats_provider",
    "settings_apply",
    "settings_apply_soon",
    "settings_current",
    "settings_forget",
    "settings_publish",
    "worker_id",
    "worker_stats",
    "workers_read",
]
