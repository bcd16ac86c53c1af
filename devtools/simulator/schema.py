"""A minimal valid instance of a JSON schema, so structured-output requests get parseable answers.

Covers what OpenAI strict schemas and pydantic produce: objects with required properties, arrays,
enums/consts, scalar bounds, ``$ref`` into ``$defs``/``definitions``, ``anyOf``/``oneOf``/``allOf`` and
type lists. Enum values are chosen by a keyword rule: the first value that appears in the question, else the
first value. Strings come from the question so the output still says something about the prompt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_MAX_DEPTH = 12
_FORMAT_EXAMPLES = {
    "date": "2025-01-01",
    "date-time": "2025-01-01T00:00:00Z",
    "time": "00:00:00Z",
    "email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
}
_LANGUAGE_NAMES = frozenset({"language", "lang", "locale"})


class SchemaInstanceBuilder:
    def __init__(self, root: Mapping[str, Any], *, question: str, summary: str, chinese: bool) -> None:
        self._root = root
        self._question = question.lower()
        self._summary = summary
        self._chinese = chinese

    def build(self) -> Any:
        return self._value(self._root, name="", depth=0)

    def _resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return schema
        node: Any = self._root
        for part in ref[2:].split("/"):
            node = node.get(part.replace("~1", "/").replace("~0", "~"), {}) if isinstance(node, Mapping) else {}
        merged = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
        return self._resolve(merged) if "$ref" in node else merged

    def _value(self, schema: Any, *, name: str, depth: int) -> Any:
        if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
            return None
        schema = self._resolve(schema)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self._choose(schema["enum"])
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                return self._value(self._prefer_non_null(options), name=name, depth=depth + 1)
        if isinstance(schema.get("allOf"), list) and schema["allOf"]:
            merged: dict[str, Any] = {}
            for part in schema["allOf"]:
                if isinstance(part, Mapping):
                    merged.update(self._resolve(part))
            merged.update({k: v for k, v in schema.items() if k != "allOf"})
            return self._value(merged, name=name, depth=depth + 1)
        kind = self._type(schema)
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, name=name, depth=depth)
        if kind == "string":
            return self._string(schema, name)
        if kind in ("integer", "number"):
            return self._number(schema, integer=kind == "integer")
        if kind == "boolean":
            return False
        return None

    @staticmethod
    def _prefer_non_null(options: list[Any]) -> Any:
        for option in options:
            if isinstance(option, Mapping) and option.get("type") != "null":
                return option
        return options[0]

    @staticmethod
    def _type(schema: Mapping[str, Any]) -> str:
        kind = schema.get("type")
        if isinstance(kind, list):
            non_null = [k for k in kind if k != "null"]
            kind = non_null[0] if non_null else "null"
        if isinstance(kind, str):
            return kind
        if "properties" in schema:
            return "object"
        if "items" in schema:
            return "array"
        return "string"

    def _choose(self, values: list[Any]) -> Any:
        for value in values:
            if isinstance(value, str) and value and self._mentioned(value):
                return value
        return values[0]

    def _mentioned(self, value: str) -> bool:
        value = value.lower()
        if value in self._question:
            return True
        words = [w for w in re.split(r"[_\-\s]+", value) if len(w) > 2]
        return bool(words) and all(w in self._question for w in words)

    def _object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        properties = schema.get("properties") or {}
        required = schema.get("required")
        names = [n for n in required if n in properties] if isinstance(required, list) else list(properties)
        result = {name: self._value(properties[name], name=name, depth=depth + 1) for name in names}
        # Required names without a property schema still have to be present.
        for name in required if isinstance(required, list) else []:
            result.setdefault(name, "")
        return result

    def _array(self, schema: Mapping[str, Any], *, name: str, depth: int) -> list[Any]:
        min_items = int(schema.get("minItems", 0))
        max_items = schema.get("maxItems")
        count = max(min_items, 1)
        if isinstance(max_items, int):
            count = min(count, max_items)
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list) and prefix:
            return [self._value(s, name=name, depth=depth + 1) for s in prefix]
        return [self._value(schema.get("items", {}), name=name, depth=depth + 1) for _ in range(count)]

    def _string(self, schema: Mapping[str, Any], name: str) -> str:
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt in _FORMAT_EXAMPLES:
            text = _FORMAT_EXAMPLES[fmt]
        elif name.lower() in _LANGUAGE_NAMES:
            text = "zh" if self._chinese else "en"
        else:
            text = self._summary
        min_length = int(schema.get("minLength", 0))
        if len(text) < min_length:
            text = text + "x" * (min_length - len(text))
        max_length = schema.get("maxLength")
        if isinstance(max_length, int):
            text = text[:max_length]
        return text

    @staticmethod
    def _number(schema: Mapping[str, Any], *, integer: bool) -> int | float:
        low = schema.get("minimum")
        exclusive_low = schema.get("exclusiveMinimum")
        high = schema.get("maximum")
        exclusive_high = schema.get("exclusiveMaximum")
        step = 1 if integer else 0.5
        value: float = low if isinstance(low, (int, float)) else 0
        if isinstance(exclusive_low, (int, float)) and value <= exclusive_low:
            value = exclusive_low + step
        if isinstance(high, (int, float)) and value > high:
            value = high
        if isinstance(exclusive_high, (int, float)) and value >= exclusive_high:
            value = exclusive_high - step
        return int(value) if integer else float(value)


def instance_for_schema(schema: Mapping[str, Any], *, question: str, summary: str, chinese: bool) -> Any:
    return SchemaInstanceBuilder(schema, question=question, summary=summary, chinese=chinese).build()
