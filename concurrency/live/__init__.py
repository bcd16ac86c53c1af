"""Live LLM concurrency settings: every worker applies a saved change within a second, and reports its stats.

Public API:

- ``settings_follow``: the change feed's handler for ``SETTINGS_TOPIC`` (registered where the app is assembled,
  ``chatbot/asgi.py``); a save publishes the topic after its commit. ``live_settings_preload()`` applies the stored
  row at server start-up, before the first connection.
- ``worker_stats_task``: with Redis, this worker's stats published for the console (``worker_stats_start()`` /
  ``worker_stats_stop()``), started by ``infra.worker_tasks.WorkerTasksMiddleware``.
- ``on_settings_applied(fn)``: ``fn(SettingsSnapshot)`` after each applied change (rpm, retries, sample rate).
- ``register_stats_provider(name, fn)``: extra per-worker stats shown in the console.
- ``worker_stats()`` / ``workers_read()``: this worker's stats; every live worker's, from Redis.
"""

from __future__ import annotations

from infra.redis_client import redis_config

from .apply import on_settings_applied, settings_apply, settings_apply_soon, settings_current, settings_forget
from .follow import SETTINGS_TOPIC, live_settings_enabled, live_settings_preload, settings_follow
from .heartbeat import (
    StatsHeartbeat,
    worker_stats_enabled,
    worker_stats_running,
    worker_stats_start,
    worker_stats_stop,
    worker_stats_task,
)
from .snapshot import SettingsSnapshot
from .workers import register_stats_provider, worker_id, worker_stats, workers_read

__all__ = [
    "SETTINGS_TOPIC",
    "SettingsSnapshot",
    "StatsHeartbeat",
    "live_settings_enabled",
    "live_settings_preload",
    "on_settings_applied",
    "redis_config",
    "register_stats_provider",
    "settings_apply",
    "settings_apply_soon",
    "settings_current",
    "settings_follow",
    "settings_forget",
    "worker_id",
    "worker_stats",
    "worker_stats_enabled",
    "worker_stats_running",
    "worker_stats_start",
    "worker_stats_stop",
    "worker_stats_task",
    "workers_read",
]
