"""JSON-schema requests get documents that parse and validate against the schema."""

from __future__ import annotations

import json
from typing import Literal

import openai
from pydantic import BaseModel, Field


class Citation(BaseModel):
    source: int = Field(ge=1)
    quote: str = Field(min_length=3)


class Routed(BaseModel):
    intent: Literal["greeting", "billing", "technical_support"]
    language: str
    needs_human: bool
    confidence: float = Field(ge=0.5, le=1.0)
    citations: list[Citation] = Field(min_length=2)
    note: str | None = None


QUESTION = "My billing statement shows a double charge, can you help?"


async def test_chat_json_schema_dict_validates(llm_client: openai.AsyncOpenAI) -> None:
    # pydantic's own (non-strict) schema: $defs/$ref, anyOf with null, bounds, optional fields.
    schema = Routed.model_json_schema()
    stream = await llm_client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": QUESTION}],
        response_format={"type": "json_schema", "json_schema": {"name": "routed", "schema": schema}},
        stream=True,
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    routed = Routed.model_validate_json(text)
    assert routed.intent == "billing"  # keyword rule: the enum value named in the question
    assert routed.language == "en"
    assert len(routed.citations) == 2 and routed.confidence == 0.5


async def test_chat_parse_with_pydantic_model(llm_client: openai.AsyncOpenAI) -> None:
    completion = await llm_client.chat.completions.parse(
        model="m", messages=[{"role": "user", "content": "你好"}], response_format=Routed
    )
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Routed)
    assert parsed.intent == "greeting" and parsed.language == "zh"


async def test_responses_parse_with_text_format(llm_client: openai.AsyncOpenAI) -> None:
    response = await llm_client.responses.parse(model="m", input=QUESTION, text_format=Routed)
    assert isinstance(response.output_parsed, Routed)
    assert response.output_parsed.intent == "billing"


async def test_responses_stream_json_schema_and_json_object(llm_client: openai.AsyncOpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 3},
            "count": {"type": "integer", "exclusiveMinimum": 4},
        },
        "required": ["tags", "count"],
        "additionalProperties": False,
    }
    stream = await llm_client.responses.create(
        model="m",
        input="tag this",
        stream=True,
        text={"format": {"type": "json_schema", "name": "tags", "schema": schema, "strict": True}},
    )
    final = [event async for event in stream][-1]
    assert final.type == "response.completed"
    assert json.loads(final.response.output_text) == {"tags": ["a", "a", "a"], "count": 5}
    plain = await llm_client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], response_format={"type": "json_object"}
    )
    assert isinstance(json.loads(plain.choices[0].message.content or ""), dict)
