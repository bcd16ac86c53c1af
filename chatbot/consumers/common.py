"""What both transports share: opening an answer's stream, the JSON form of an event and the events they make up
themselves."""

from __future__ import annotations

import json
import math
from typing import Any

from chatbot import drain
from chatbot.cancel import cancel_listen
from chatbot.replay import LiveStream, stream_registry
from chatbot.streaming import ChatExchange, transport_error_event
from rag.events import Event

__all__ = ["event_json", "retry_after_seconds", "stream_open", "transport_error_event"]


def stream_open(exchange: ChatExchange, *, on_disconnect: str) -> LiveStream:
    """Relay an exchange's events (`chatbot.replay`) and let a cancel from any worker reach it (`chatbot.cancel`)."""
    stream = stream_registry().open(exchange, on_disconnect=on_disconnect)
    cancel_listen(stream)
    if drain.window_closed():
        # Asked just before the drain began and opened just after its window closed: it ends at once.
        stream.interrupt(drain.UNAVAILABLE, drain.INTERRUPTED_MESSAGE, **drain.interrupt_payload())
    return stream


def event_json(event: Event) -> str:
    # ensure_ascii=False: Chinese answers stay readable and a third the size; both transports are UTF-8.
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


def retry_after_seconds(event: Event, default: float = 1.0) -> int:
    """Whole seconds for a `Retry-After` header from a `busy` event (at least 1: 0 invites a busy loop)."""
    value: Any = event.get("retry_after", default)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = default
    if not math.isfinite(seconds):
        seconds = default
    return max(1, math.ceil(seconds))
