"""The one JSON error shape of every JSON endpoint, and the one way a JSON request body is read.

Every JSON API (chat, feedback, jobs, workflows, the concurrency APIs) answers a refusal as
``{"error": {"code": ..., "message": ..., <extras>}}``; only the OpenAI-compatible API under ``/v1/`` keeps
OpenAI's own shape. It lives here, in the lowest layer, so every package can use it.

`json_decode` refuses what would otherwise fail later with a 500: a body nested deeper than any request needs
(RecursionError in whatever walks it), and text that no database or encoder accepts (a lone UTF-16 surrogate
from a ``"\\ud800"`` escape, a NUL, which PostgreSQL refuses in text). The error names the field.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import JsonResponse

# Deeper than any request of ours (a workflow graph is a few levels); far below Python's recursion limit.
MAX_DEPTH = 32


class JsonInputError(ValueError):
    """A request body refused: the HTTP status, and the field (a dotted path, or ``body``) it names."""

    def __init__(self, field: str, message: str, *, status: int = 400) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status


def json_error(status: int, code: str, message: str, **extra: Any) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message, **extra}}, status=status)


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored as text, or None when it can."""
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone UTF-16 surrogate (not valid Unicode text)"
    return None


def json_decode(raw: bytes | str, *, max_bytes: int | None = None, empty: Any = None) -> Any:
    """Parse a request body as JSON (UTF-8 only), then check its depth and every string in it (keys too).

    Raises JsonInputError: 413 past `max_bytes`, else 400 naming the field. An empty body gives `empty` when that
    is not None."""
    if max_bytes is not None and len(raw) > max_bytes:
        raise JsonInputError("body", f"request body is larger than {max_bytes} bytes", status=413)
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise JsonInputError("body", "request body is not UTF-8 text") from None
    if empty is not None and not text.strip():
        return empty
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise JsonInputError("body", f"request body is not valid JSON: {exc.msg} at {where}") from None
    except RecursionError:
        raise JsonInputError("body", f"request body is nested deeper than {MAX_DEPTH} levels") from None
    json_check(value)
    return value


def json_check(value: Any) -> None:
    """Walk a decoded JSON value without recursion; raise JsonInputError at the first bad depth or string."""
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack:
        path, item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise JsonInputError("body", f"request body is nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, str):
            problem = text_problem(item)
            if problem:
                raise JsonInputError(path or "body", problem)
        elif isinstance(item, dict):
            for key, child in item.items():
                problem = text_problem(key)
                if problem:
                    raise JsonInputError(path or "body", f"a key {problem}")
                stack.append((f"{path}.{key}" if path else key, child, depth + 1))
        elif isinstance(item, list):
            stack.extend((f"{path}[{index}]", child, depth + 1) for index, child in enumerate(item))
