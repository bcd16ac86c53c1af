"""Resumable answer streams: every answer's events are kept for a retention window, so a client that loses its
connection mid-answer reconnects and receives exactly the events it missed (SSE `Last-Event-ID`, WebSocket
`resume`). See `registry` for retention and bounds, `live` for the relay, `redis_store` for the shared copy.

Settings (read once, when the registry is first used): `CHAT_STREAM_RETENTION_SECONDS` (300),
`CHAT_STREAM_MAX_EVENTS` per stream (10 000), `CHAT_STREAM_MAX_STREAMS` finished streams kept in memory (1 000);
`REDIS_URL` / `REDIS_PREFIX` switch the shared copy on.
"""

from __future__ import annotations

from django.conf import settings

from chatbot.replay.live import LiveStream, ResumeRefused
from chatbot.replay.redis_store import RedisStreamStore
from chatbot.replay.registry import Resumption, StreamRegistry
from concurrency.live.workers import redis_config

__all__ = [
    "LiveStream",
    "ResumeRefused",
    "Resumption",
    "StreamRegistry",
    "stream_registry",
    "stream_registry_reset",
]

_registry: StreamRegistry | None = None


def _registry_from_settings(**overrides: float) -> StreamRegistry:
    retention = float(overrides.get("retention_seconds", getattr(settings, "CHAT_STREAM_RETENTION_SECONDS", 300.0)))
    max_events = int(overrides.get("max_events", getattr(settings, "CHAT_STREAM_MAX_EVENTS", 10_000)))
    max_streams = int(overrides.get("max_streams", getattr(settings, "CHAT_STREAM_MAX_STREAMS", 1_000)))
    redis_url, prefix = redis_config()  # the channel layer's prefix, so one Redis can serve several deployments
    store = (
        RedisStreamStore(redis_url, prefix, retention_seconds=retention, max_events=max_events) if redis_url else None
    )
    return StreamRegistry(retention_seconds=retention, max_events=max_events, max_streams=max_streams, store=store)


def stream_registry() -> StreamRegistry:
    """The process's registry, built from settings on first use."""
    global _registry
    if _registry is None:
        _registry = _registry_from_settings()
    return _registry


def stream_registry_reset(**overrides: float) -> StreamRegistry:
    """A fresh registry (tests: e.g. `retention_seconds=0.3`); streams of the old one are forgotten."""
    global _registry
    _registry = _registry_from_settings(**overrides)
    return _registry
