"""Structured LLM output as pydantic models: what the hand-written JSON-schema checker accepted and refused, the
models of the planner, the query builder, the backfill and the judge, and the schemas they send."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, get_args

import pytest
from pydantic import BaseModel, Field

from rag.documents.backfill import DescriptionOutput
from rag.evaluation.runner import Judgement
from rag.llm import InvalidLLMOutput, StructuredOutput, output_schema, parse_output
from rag.nodes.planner import Intent, PlanOutput
from rag.nodes.query_builder import VariationOutput
from rag.state import INTENTS


class Sample(StructuredOutput):
    """The old checker's test schema, as a model."""

    intent: Literal["simple_faq", "out_of_scope"]
    should_retrieve: bool
    score: float | None = Field(default=None, ge=0, le=1)
    count: int | None = None
    note: str | None = Field(default=None, max_length=5)
    tags: list[Annotated[str, Field(min_length=1)]] | None = Field(default=None, max_length=2)


def problems(doc: Any, model: type[BaseModel] = Sample) -> str:
    text = json.dumps(doc)
    with pytest.raises(InvalidLLMOutput) as info:
        parse_output(text, model)
    assert info.value.text == text
    return info.value.reason


def test_a_conforming_document_is_parsed() -> None:
    doc = '{"intent": "simple_faq", "should_retrieve": true, "score": 0.5, "count": 2, "note": null, "tags": ["a"]}'
    assert parse_output(doc, Sample) == Sample(
        intent="simple_faq", should_retrieve=True, score=0.5, count=2, note=None, tags=["a"]
    )


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        ({"intent": "simple_faq"}, "$.should_retrieve: Field required"),
        ({"intent": "chitchat", "should_retrieve": True}, "$.intent: Input should be 'simple_faq' or"),
        ({"intent": "simple_faq", "should_retrieve": 1}, "$.should_retrieve: Input should be a valid boolean"),
        ({"intent": "simple_faq", "should_retrieve": True, "count": True}, "$.count: Input should be a valid integer"),
        ({"intent": "simple_faq", "should_retrieve": True, "count": 1.5}, "$.count: Input should be a valid integer"),
        ({"intent": "simple_faq", "should_retrieve": True, "count": "3"}, "$.count: Input should be a valid integer"),
        ({"intent": "simple_faq", "should_retrieve": True, "score": 2}, "$.score: Input should be less than or equal"),
        ({"intent": "simple_faq", "should_retrieve": True, "note": "too long"}, "$.note: String should have at most"),
        ({"intent": "simple_faq", "should_retrieve": True, "tags": ["a", ""]}, "$.tags[1]: String should have at"),
        ({"intent": "simple_faq", "should_retrieve": True, "tags": ["a", "b", "c"]}, "$.tags: List should have at"),
        ({"intent": "simple_faq", "should_retrieve": True, "extra": 1}, "$.extra: Extra inputs are not permitted"),
        (["not", "an", "object"], "$: Input should be an object"),
    ],
)
def test_each_violation_is_named_with_its_path(doc: Any, error: str) -> None:
    reason = problems(doc)
    assert reason.startswith("does not match the schema: ") and error in reason, reason


def test_parse_accepts_a_code_fence() -> None:
    text = '```json\n{"intent": "out_of_scope", "should_retrieve": false}\n```'
    assert parse_output(text, Sample) == Sample(intent="out_of_scope", should_retrieve=False)


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
        parse_output(text, Sample)
    assert reason in info.value.reason
    assert info.value.text == text


# The schemas as they were written by hand before the outputs became models: what the server is sent is the same.
HAND_WRITTEN = [
    (
        PlanOutput,
        {
            "type": "object",
            "properties": {
                "intent": {"type": "string", "enum": list(INTENTS)},
                "should_retrieve": {"type": "boolean"},
                "followup_instruction": {"type": "string"},
            },
            "required": ["intent", "should_retrieve", "followup_instruction"],
            "additionalProperties": False,
        },
    ),
    (
        VariationOutput,
        {
            "type": "object",
            "properties": {"queries": {"type": "array", "items": {"type": "string"}}},
            "required": ["queries"],
            "additionalProperties": False,
        },
    ),
    (
        DescriptionOutput,
        {
            "type": "object",
            "properties": {"zh-hant": {"type": "string"}, "en": {"type": "string"}},
            "required": ["zh-hant", "en"],
            "additionalProperties": False,
        },
    ),
    (
        Judgement,
        {
            "type": "object",
            "properties": {
                "faithfulness": {"type": "integer", "minimum": 1, "maximum": 5},
                "relevance": {"type": "integer", "minimum": 1, "maximum": 5},
                "reason": {"type": "string", "maxLength": 300},
            },
            "required": ["faithfulness", "relevance", "reason"],
            "additionalProperties": False,
        },
    ),
]


@pytest.mark.parametrize(("model", "schema"), HAND_WRITTEN, ids=lambda m: getattr(m, "__name__", ""))
def test_each_model_sends_the_schema_that_was_written_by_hand(model: type[BaseModel], schema: dict[str, Any]) -> None:
    assert output_schema(model) == schema


def test_the_planner_intents_are_the_states() -> None:
    assert get_args(Intent) == INTENTS


@pytest.mark.parametrize(
    ("model", "good", "bad"),
    [
        (
            PlanOutput,
            {"intent": "form_download", "should_retrieve": True, "followup_instruction": ""},
            [
                {"intent": "weather", "should_retrieve": True, "followup_instruction": ""},
                {"intent": "simple_faq", "should_retrieve": "yes", "followup_instruction": ""},
                {"intent": "simple_faq", "should_retrieve": True},
                {"intent": "simple_faq", "should_retrieve": True, "followup_instruction": "", "queries": []},
            ],
        ),
        (
            VariationOutput,
            {"queries": ["reset password", "forgot password"]},
            [{"queries": "reset password"}, {"queries": ["ok", 3]}, {}, {"queries": [], "strategy": "broader"}],
        ),
        (
            DescriptionOutput,
            {"zh-hant": "重設密碼的步驟", "en": "How to reset a password"},
            [{"zh_hant": "重設密碼", "en": "Reset"}, {"zh-hant": "重設密碼"}, {"zh-hant": 1, "en": "x"}],
        ),
        (
            Judgement,
            {"faithfulness": 5, "relevance": 3, "reason": "cites the passage"},
            [
                {"faithfulness": 0, "relevance": 3, "reason": ""},
                {"faithfulness": 5, "relevance": 6, "reason": ""},
                {"faithfulness": "5", "relevance": 3, "reason": ""},
                {"faithfulness": 5, "relevance": 3, "reason": "x" * 301},
            ],
        ),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_each_model_accepts_a_good_output_and_refuses_bad_ones(
    model: type[BaseModel], good: dict[str, Any], bad: list[dict[str, Any]]
) -> None:
    assert parse_output(json.dumps(good), model).model_dump(by_alias=True) == good
    for doc in bad:
        assert problems(doc, model).startswith("does not match the schema: "), doc
