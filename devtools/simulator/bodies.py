"""Validation helpers for request bodies: a bad field becomes a 400 naming it, as vLLM does."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# What a json_object request (no schema) gets: a one-field object, the smallest useful JSON answer.
JSON_OBJECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}


class BadRequest(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def parse_json_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw or b"{}")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"Request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("Request body must be a JSON object.")
    return body


def optional_int(body: Mapping[str, Any], *names: str, minimum: int = 1) -> int | None:
    """The first of ``names`` present (not null) in the body, validated as an integer >= minimum."""
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise BadRequest(f"{name} must be an integer >= {minimum}, got {value!r}.")
        return value
    return None


def flag(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be a boolean, got {value!r}.")
    return value


def single_choice(body: Mapping[str, Any]) -> None:
    if body.get("n") not in (None, 1):
        raise BadRequest("The simulator only generates one choice (n=1).")


def _schema_of(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise BadRequest(f"{where} is not valid JSON.") from None
    if not isinstance(value, dict):
        raise BadRequest(f"{where} must be a JSON schema object.")
    return value


def chat_schema(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """Schema requested by response_format (OpenAI) or guided_json (vLLM's older extra parameter)."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        kind = response_format.get("type")
        if kind == "json_schema":
            spec = response_format.get("json_schema")
            if not isinstance(spec, dict) or "schema" not in spec:
                raise BadRequest("response_format.json_schema.schema is required.")
            return _schema_of(spec["schema"], "response_format.json_schema.schema")
        if kind == "json_object":
            # llama.cpp's server constrains json_object to a schema given beside it
            if response_format.get("schema") is not None:
                return _schema_of(response_format["schema"], "response_format.schema")
            return JSON_OBJECT_SCHEMA
    if body.get("guided_json") is not None:
        return _schema_of(body["guided_json"], "guided_json")
    return None


def responses_schema(body: Mapping[str, Any]) -> dict[str, Any] | None:
    text = body.get("text")
    text_format = text.get("format") if isinstance(text, dict) else None
    if not isinstance(text_format, dict):
        return None
    if text_format.get("type") == "json_schema":
        if "schema" not in text_format:
            raise BadRequest("text.format.schema is required.")
        return _schema_of(text_format["schema"], "text.format.schema")
    if text_format.get("type") == "json_object":
        return JSON_OBJECT_SCHEMA
    return None
