"""Non-streaming completions with structured (pydantic-model) output, end to end against the simulator."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import Field

from concurrency.simulator.testing import SimulatorProcess
from rag.llm import InvalidLLMOutput, StructuredOutput
from rag.llm.backends import ChatBackend
from tests.rag.llm.conftest import USER, BackendFactory


class Plan(StructuredOutput):
    intent: Literal["simple_faq", "form_download", "out_of_scope"]
    should_retrieve: bool
    queries: list[str] = Field(min_length=1, max_length=3)


# The schema the server is sent for Plan, as it was written by hand before the output became a model.
PLAN_SCHEMA = {
    "type": "object",
    "properties": {
        "intent": {"type": "string", "enum": ["simple_faq", "form_download", "out_of_scope"]},
        "should_retrieve": {"type": "boolean"},
        "queries": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
    },
    "required": ["intent", "should_retrieve", "queries"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_structured_output_is_parsed_into_its_model(
    api: ChatBackend, make_backend: BackendFactory, sim: SimulatorProcess
) -> None:
    messages = [{"role": "system", "content": "Plan the answer."}, {"role": "user", "content": "form download"}]
    result = await make_backend().complete(backend=api, node="planner", messages=messages, output=Plan)

    assert isinstance(result.parsed, Plan)
    assert result.parsed.intent == "form_download"  # the simulator picks the enum value it was asked about
    assert len(result.parsed.queries) == 1
    assert result.usage.output_tokens > 0 and result.usage.input_tokens > 0
    (request,) = await sim.arequests()
    body = request["body"]
    assert "stream" not in body or body["stream"] is False
    if api == "chat":
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "planner_output", "schema": PLAN_SCHEMA, "strict": True},
        }
    else:
        assert body["text"] == {
            "format": {"type": "json_schema", "name": "planner_output", "schema": PLAN_SCHEMA, "strict": True}
        }
        assert body["instructions"] == "Plan the answer."


async def test_plain_completion_has_no_parsed_output(make_backend: BackendFactory) -> None:
    result = await make_backend().complete(backend="chat", node="n", messages=USER)
    assert result.text.startswith("Summary:") and result.parsed is None


async def test_output_the_schema_cannot_accept_raises_invalid_llm_output(make_backend: BackendFactory) -> None:
    # No number is >= 10 and <= 5: whatever the server produces, the check must catch it rather than pass it on.
    class Impossible(StructuredOutput):
        n: int = Field(ge=10, le=5)

    with pytest.raises(
        InvalidLLMOutput, match=r"\$\.n: Input should be (greater|less) than or equal to (10|5)"
    ) as info:
        await make_backend().complete(backend="chat", node="planner", messages=USER, output=Impossible)
    assert info.value.text  # the raw output is kept for debugging
