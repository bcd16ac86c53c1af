"""A small JSON Schema checker for structured LLM output, and the parsing around it.

Even with ``strict`` structured output, an OpenAI-compatible server may ignore the schema (older vLLM, another
guided-decoding backend, a model that stops at max_tokens), so the planner must not trust the shape. This covers
the subset our schemas use - type (or a list of types), properties, required, additionalProperties, enum,
const, items, min/max items and length, minimum/maximum, anyOf/oneOf (as "any of") and local ``$ref`` - without
a new dependency. Unknown keywords are ignored, as JSON Schema does.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from rag.llm.errors import InvalidLLMOutput

__all__ = ["parse_json_output", "schema_errors", "validate_json"]

_MAX_DEPTH = 32
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n?\s*```\s*$", re.DOTALL | re.IGNORECASE)


def _is_type(value: Any, kind: str) -> bool:
    # bool is an int subclass in Python but never a number in JSON.
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and math.isfinite(value) and value.is_integer()
        )
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True  # an unknown type name constrains nothing rather than rejecting everything


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


class _Checker:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self._root = root
        self.errors: list[str] = []

    def _resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            return schema
        node: Any = self._root
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                raise ValueError(f"unresolvable $ref {ref!r} in the JSON schema")
            node = node[part]
        return node

    def check(self, value: Any, schema: Any, path: str, depth: int = 0) -> None:
        if not isinstance(schema, Mapping):
            return  # `true` / `{}`-like schemas accept anything
        if depth > _MAX_DEPTH:
            raise ValueError("JSON schema nests too deeply (recursive $ref?)")
        schema = self._resolve(schema)
        kinds = schema.get("type")
        if kinds is not None:
            allowed = kinds if isinstance(kinds, list) else [kinds]
            if not any(_is_type(value, k) for k in allowed):
                self.errors.append(f"{path}: expected {' or '.join(map(str, allowed))}, got {_short(value)}")
                return
        if "const" in schema and value != schema["const"]:
            self.errors.append(f"{path}: expected {_short(schema['const'])}, got {_short(value)}")
        enum = schema.get("enum")
        if isinstance(enum, list) and value not in enum:
            self.errors.append(f"{path}: {_short(value)} is not one of {_short(enum)}")
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options and not any(self._passes(value, o, path, depth) for o in options):
                self.errors.append(f"{path}: {_short(value)} matches none of the {key} options")
        for part in schema.get("allOf") or ():
            self.check(value, part, path, depth + 1)
        if isinstance(value, dict):
            self._object(value, schema, path, depth)
        elif isinstance(value, list):
            self._array(value, schema, path, depth)
        elif isinstance(value, str):
            self._bounds(len(value), schema.get("minLength"), schema.get("maxLength"), path, "characters")
        elif _is_type(value, "number"):
            self._range(value, schema, path)

    def _passes(self, value: Any, schema: Any, path: str, depth: int) -> bool:
        probe = _Checker(self._root)
        probe.check(value, schema, path, depth + 1)
        return not probe.errors

    def _object(self, value: dict[str, Any], schema: Mapping[str, Any], path: str, depth: int) -> None:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        for name in schema.get("required") or ():
            if name not in value:
                self.errors.append(f"{path}: missing required property {name!r}")
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            child = f"{path}.{name}"
            if name in properties:
                self.check(item, properties[name], child, depth + 1)
            elif extra is False:
                self.errors.append(f"{path}: unexpected property {name!r}")
            elif isinstance(extra, Mapping):
                self.check(item, extra, child, depth + 1)

    def _array(self, value: list[Any], schema: Mapping[str, Any], path: str, depth: int) -> None:
        self._bounds(len(value), schema.get("minItems"), schema.get("maxItems"), path, "items")
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                self.check(item, items, f"{path}[{index}]", depth + 1)

    def _bounds(self, size: int, low: Any, high: Any, path: str, unit: str) -> None:
        if isinstance(low, int) and size < low:
            self.errors.append(f"{path}: {size} {unit}, fewer than the minimum {low}")
        if isinstance(high, int) and size > high:
            self.errors.append(f"{path}: {size} {unit}, more than the maximum {high}")

    def _range(self, value: float, schema: Mapping[str, Any], path: str) -> None:
        checks = (
            ("minimum", lambda bound: value < bound, "below the minimum"),
            ("maximum", lambda bound: value > bound, "above the maximum"),
            ("exclusiveMinimum", lambda bound: value <= bound, "not above the exclusive minimum"),
            ("exclusiveMaximum", lambda bound: value >= bound, "not below the exclusive maximum"),
        )
        for key, fails, words in checks:
            bound = schema.get(key)
            if isinstance(bound, int | float) and not isinstance(bound, bool) and fails(bound):
                self.errors.append(f"{path}: {_short(value)} is {words} {bound}")


def schema_errors(instance: Any, schema: Mapping[str, Any]) -> list[str]:
    """Every violation of ``schema`` by ``instance``, each as ``"$.path: reason"``; empty when it conforms."""
    checker = _Checker(schema)
    checker.check(instance, schema, "$")
    return checker.errors


def validate_json(instance: Any, schema: Mapping[str, Any], *, text: str = "") -> None:
    """Raise InvalidLLMOutput naming the first violations when ``instance`` does not conform."""
    errors = schema_errors(instance, schema)
    if errors:
        shown = "; ".join(errors[:3]) + (f" (+{len(errors) - 3} more)" if len(errors) > 3 else "")
        raise InvalidLLMOutput(f"does not match the schema: {shown}", text=text)


def parse_json_output(text: str, schema: Mapping[str, Any] | None = None) -> Any:
    """The JSON value in a model's answer, checked against ``schema`` when one is given.

    Tolerates a Markdown code fence around the JSON (models add one even when told not to); anything else that
    is not exactly one JSON value is rejected with InvalidLLMOutput.
    """
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body:
        raise InvalidLLMOutput("empty output where JSON was expected", text=text)
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        raise InvalidLLMOutput(
            f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", text=text
        ) from None
    if schema is not None:
        validate_json(value, schema, text=text)
    return value
