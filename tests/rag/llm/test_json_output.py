"""The small JSON Schema checker used on structured LLM output."""

from __future__ import annotations

from typing import Any

import pytest

from rag.llm import InvalidLLMOutput, parse_json_output, schema_errors

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "intent": {"type": "string", "enum": ["simple_faq", "out_of_scope"]},
        "should_retrieve": {"type": "boolean"},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "count": {"type": "integer"},
        "note": {"type": ["string", "null"], "maxLength": 5},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "maxItems": 2},
    },
    "required": ["intent", "should_retrieve"],
    "additionalProperties": False,
    "$defs": {"tag": {"type": "string", "minLength": 1}},
}


def test_conforming_document_has_no_errors() -> None:
    doc = {"intent": "simple_faq", "should_retrieve": True, "score": 0.5, "count": 2.0, "note": None, "tags": ["a"]}
    assert schema_errors(doc, SCHEMA) == []


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        ({"intent": "simple_faq"}, "$: missing required property 'should_retrieve'"),
        ({"intent": "chitchat", "should_retrieve": True}, '$.intent: "chitchat" is not one of'),
        ({"intent": "simple_faq", "should_retrieve": 1}, "$.should_retrieve: expected boolean, got 1"),
        ({"intent": "simple_faq", "should_retrieve": True, "count": True}, "$.count: expected integer, got true"),
        ({"intent": "simple_faq", "should_retrieve": True, "count": 1.5}, "$.count: expected integer"),
        ({"intent": "simple_faq", "should_retrieve": True, "score": 2}, "$.score: 2 is above the maximum 1"),
        ({"intent": "simple_faq", "should_retrieve": True, "note": "too long"}, "$.note: 8 characters, more than"),
        ({"intent": "simple_faq", "should_retrieve": True, "tags": ["a", ""]}, "$.tags[1]: 0 characters"),
        ({"intent": "simple_faq", "should_retrieve": True, "tags": [1, 2, 3]}, "$.tags: 3 items, more than"),
        ({"intent": "simple_faq", "should_retrieve": True, "extra": 1}, "$: unexpected property 'extra'"),
        (["not", "an", "object"], "$: expected object"),
    ],
)
def test_each_violation_is_named_with_its_path(doc: Any, error: str) -> None:
    errors = schema_errors(doc, SCHEMA)
    assert any(e.startswith(error) for e in errors), errors


def test_any_of_and_const() -> None:
    schema = {"anyOf": [{"const": "none"}, {"type": "integer", "minimum": 1}]}
    assert schema_errors("none", schema) == [] and schema_errors(3, schema) == []
    assert schema_errors(0, schema) == ["$: 0 matches none of the anyOf options"]


def test_parse_accepts_a_code_fence_and_validates() -> None:
    text = '```json\n{"intent": "out_of_scope", "should_retrieve": false}\n```'
    assert parse_json_output(text, SCHEMA) == {"intent": "out_of_scope", "should_retrieve": False}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("Sure! Here is the plan: {}", "not valid JSON"),
        ('{"intent": "simple_faq"', "not valid JSON"),
        ('{"intent": "weather", "should_retrieve": true}', "does not match the schema: $.intent"),
    ],
)
def test_parse_rejects_what_callers_cannot_use(text: str, reason: str) -> None:
    with pytest.raises(InvalidLLMOutput) as info:
        parse_json_output(text, SCHEMA)
    assert reason in info.value.reason
    assert info.value.text == text
