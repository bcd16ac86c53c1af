"""Telemetry from Django settings: one instance per process, shared by the pipeline and the feedback endpoint.

Shared because an unsampled request's summary lives in the instance that saw the request; the feedback endpoint
must look in the same one. It outlives a rebuilt pipeline runtime (reindex) and is shut down, flushing what is
queued, when the process exits.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from rag.telemetry.facade import Exporter, Telemetry

_lock = threading.Lock()
_telemetry: Telemetry | None = None

# Settings this module reads, with their defaults (the Langfuse keys, host and sample rate are the project's).
DEFAULTS: dict[str, Any] = {
    # "process": the SDK works in a child process, off this process's GIL (see rag.telemetry.process_export);
    # "thread": on a background thread of this process (no extra process, but its CPU competes with the loop).
    "TELEMETRY_EXPORTER": "process",
    "TELEMETRY_QUEUE_SIZE": 1000,  # finished requests and scores waiting for the exporter thread
    "TELEMETRY_SUMMARY_LIMIT": 10_000,  # unsampled requests remembered for feedback (about 1 KB each)
    "TELEMETRY_SHUTDOWN_TIMEOUT": 5.0,  # seconds the process exit waits for queued traces
    "LANGFUSE_FLUSH_AT": 0,  # spans/scores per export batch; 0: the SDK's default (512 spans, 15 scores)
    "LANGFUSE_FLUSH_INTERVAL": 0.0,  # seconds between exports; 0: the SDK's default (5 s spans, 1 s scores)
    "LANGFUSE_TIMEOUT": 5,  # seconds per export request
    "LANGFUSE_ENVIRONMENT": "",  # Langfuse environment name; empty: "default"
}


def _setting(name: str) -> Any:
    return getattr(settings, name, DEFAULTS.get(name))


def _number(name: str, kind: type, minimum: float) -> Any:
    value = _setting(name)
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise ImproperlyConfigured(f"{name} must be a {kind.__name__}, got {value!r}") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {number}")
    return number


def build_telemetry_from_settings() -> Telemetry:
    """A new Telemetry: enabled (with its exporter) when both Langfuse keys are set, else the no-op."""
    sample_rate = _number("LANGFUSE_SAMPLE_RATE", float, 0.0)
    if sample_rate > 1.0:
        raise ImproperlyConfigured(f"LANGFUSE_SAMPLE_RATE must be between 0.0 and 1.0, got {sample_rate}")
    summary_limit = _number("TELEMETRY_SUMMARY_LIMIT", int, 0)
    public_key = _setting("LANGFUSE_PUBLIC_KEY") or ""
    secret_key = _setting("LANGFUSE_SECRET_KEY") or ""
    if not (public_key and secret_key):
        return Telemetry(sample_rate=sample_rate, summary_limit=summary_limit)

    mode = _setting("TELEMETRY_EXPORTER")
    if mode not in ("process", "thread"):
        raise ImproperlyConfigured(f"TELEMETRY_EXPORTER must be 'process' or 'thread', got {mode!r}")
    options = {
        "public_key": public_key,
        "secret_key": secret_key,
        "host": _setting("LANGFUSE_HOST") or "https://cloud.langfuse.com",
        "flush_at": _number("LANGFUSE_FLUSH_AT", int, 0) or None,
        "flush_interval": _number("LANGFUSE_FLUSH_INTERVAL", float, 0.0) or None,
        "timeout": _number("LANGFUSE_TIMEOUT", int, 1),
        "environment": _setting("LANGFUSE_ENVIRONMENT") or None,
    }
    queue_size = _number("TELEMETRY_QUEUE_SIZE", int, 1)
    exporter: Exporter
    try:
        # Imported here: only the exporter configured is loaded; the in-process one pulls in the langfuse SDK.
        if mode == "process":
            from rag.telemetry.process_export import LangfuseProcessExporter

            exporter = LangfuseProcessExporter(queue_size=queue_size, **options)
        else:
            from rag.telemetry.langfuse_export import LangfuseExporter

            exporter = LangfuseExporter(queue_size=queue_size, **options)
    except ValueError as exc:  # the SDK's own checks, e.g. LANGFUSE_FLUSH_AT above the span queue (2048)
        raise ImproperlyConfigured(f"Langfuse telemetry settings: {exc}") from exc
    return Telemetry(sample_rate=sample_rate, exporter=exporter, summary_limit=summary_limit)


def get_telemetry() -> Telemetry:
    """The process's Telemetry, built on first use."""
    global _telemetry
    if _telemetry is None:
        with _lock:
            if _telemetry is None:
                telemetry = build_telemetry_from_settings()
                if telemetry.enabled:
                    atexit.register(_shutdown_at_exit, telemetry)
                _telemetry = telemetry
    return _telemetry


def current_telemetry() -> Telemetry | None:
    """The process's Telemetry if it was built already; never builds it (safe on the event loop)."""
    return _telemetry


def reset_telemetry() -> None:
    """Shut the process's Telemetry down and forget it (tests)."""
    global _telemetry
    with _lock:
        telemetry, _telemetry = _telemetry, None
    if telemetry is not None:
        atexit.unregister(_shutdown_at_exit)
        telemetry.shutdown(_number("TELEMETRY_SHUTDOWN_TIMEOUT", float, 0.0))


def _shutdown_at_exit(telemetry: Telemetry) -> None:
    telemetry.shutdown(_number("TELEMETRY_SHUTDOWN_TIMEOUT", float, 0.0))
