"""Non-streaming completions with JSON-schema output, end to end against the simulator."""

from __future__ import annotations

import pytest

from concurrency.simulator.testing import SimulatorProcess
from rag.llm import InvalidLLMOutput
from rag.llm.backends import ChatBackend
from tests.rag.llm.conftest import USER, BackendFactory

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
async def test_json_schema_output_is_parsed_and_validated(
    api: ChatBackend, make_backend: BackendFactory, sim: SimulatorProcess
) -> None:
    messages = [{"role": "system", "content": "Plan the answer."}, {"role": "user", "content": "form download"}]
    result = await make_backend().complete(backend=api, node="planner", messages=messages, json_schema=PLAN_SCHEMA)

    assert result.parsed_json["intent"] == "form_download"  # the simulator picks the enum value it was asked about
    assert isinstance(result.parsed_json["should_retrieve"], bool)
    assert len(result.parsed_json["queries"]) == 1
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


async def test_plain_completion_has_no_parsed_json(make_backend: BackendFactory) -> None:
    result = await make_backend().complete(backend="chat", node="n", messages=USER)
    assert result.text.startswith("Summary:") and result.parsed_json is None


async def test_output_the_schema_cannot_accept_raises_invalid_llm_output(make_backend: BackendFactory) -> None:
    # No number is >= 10 and <= 5: whatever the server produces, the check must catch it rather than pass it on.
    impossible = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 10, "maximum": 5}},
        "required": ["n"],
    }
    with pytest.raises(InvalidLLMOutput, match=r"\$\.n: .* (below the minimum 10|above the maximum 5)") as info:
        await make_backend().complete(backend="chat", node="planner", messages=USER, json_schema=impossible)
    assert info.value.text  # the raw output is kept for debugging
