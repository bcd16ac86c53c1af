"""Non-streaming completions with structured (pydantic-model) output, end to end against the simulator."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import Field

from devtools.simulator.testing import SimulatorProcess
from rag.errors import UpstreamError
from rag.llm import InvalidLLMOutput, StructuredOutput
from rag.llm.backends import ChatBackend, _read_reply
from rag.state import Usage
from tests.rag.llm.conftest import USER, AttemptLog, BackendFactory


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


# What complete() sent before its request skipped the SDK's params transform, for the same call: the same keys and
# values, extra_body merged at the top level.
EXTRA_BODY = {"top_k": 5, "chat_template_kwargs": {"enable_thinking": False}}
SENT_BEFORE: dict[str, dict[str, Any]] = {
    "chat": {
        "model": "sim-chat",
        "messages": [{"role": "system", "content": "Plan the answer."}, {"role": "user", "content": "form download"}],
        "max_tokens": 50,
        "temperature": 0.2,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "plan_v2", "schema": PLAN_SCHEMA, "strict": True},
        },
        **EXTRA_BODY,
    },
    "responses": {
        "model": "sim-chat",
        "instructions": "Plan the answer.",
        "input": [{"role": "user", "content": "form download"}],
        "max_output_tokens": 50,
        "temperature": 0.2,
        "text": {"format": {"type": "json_schema", "name": "plan_v2", "schema": PLAN_SCHEMA, "strict": True}},
        **EXTRA_BODY,
    },
}
PLAN_MESSAGES = [{"role": "system", "content": "Plan the answer."}, {"role": "user", "content": "form download"}]


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_the_request_body_is_the_one_sent_before_and_usage_is_the_servers(
    api: ChatBackend, make_backend: BackendFactory, sim: SimulatorProcess
) -> None:
    result = await make_backend().complete(
        backend=api,
        node="planner",
        messages=PLAN_MESSAGES,
        output=Plan,
        schema_name="plan v2",
        temperature=0.2,
        max_tokens=50,
        extra_body=EXTRA_BODY,
    )

    assert isinstance(result.parsed, Plan)
    (request,) = await sim.arequests()
    assert request["body"] == SENT_BEFORE[api]
    counted = (await sim.astats())["endpoints"][api]
    assert (result.usage.input_tokens, result.usage.output_tokens) == (
        counted["prompt_tokens"],
        counted["completion_tokens"],
    )
    assert result.usage.total_tokens == result.usage.input_tokens + result.usage.output_tokens


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_plain_completion_reads_the_answer_text_of_either_api(
    api: ChatBackend, make_backend: BackendFactory
) -> None:
    result = await make_backend().complete(backend=api, node="summary", instructions="Summarise.", input="hello")
    assert result.text.startswith("Summary: hello") and result.parsed is None
    assert result.usage.output_tokens > 0


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_invalid_structured_output_of_either_api_raises_with_its_text_and_usage(
    api: ChatBackend, make_backend: BackendFactory
) -> None:
    class Impossible(StructuredOutput):
        n: int = Field(ge=10, le=5)

    with pytest.raises(InvalidLLMOutput) as info:
        await make_backend().complete(backend=api, node="planner", messages=USER, output=Impossible)
    assert info.value.text
    assert info.value.usage is not None and info.value.usage.output_tokens > 0


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_500_is_retried_then_the_answer_is_read(
    api: ChatBackend, make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(fail_next=["500"])
    result = await make_backend().complete(backend=api, node="planner", messages=PLAN_MESSAGES, output=Plan)

    assert isinstance(result.parsed, Plan)
    assert attempts.outcomes == ["status", "ok"]
    first, second = await sim.arequests()
    assert first["body"] == second["body"]


async def test_a_429_waits_for_its_retry_after_before_the_second_attempt(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(fail_next=["429"], retry_after=1)
    result = await make_backend().complete(backend="responses", node="n", messages=USER)

    assert result.text
    assert attempts.outcomes == ["status", "ok"]
    first, second = await sim.arequests()
    assert second["time"] - first["time"] >= 1.0  # the server's Retry-After, not the 0.01 s backoff


async def test_server_errors_on_every_attempt_end_as_upstream_error_with_the_status(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(fail_next=["500"] * 3)
    with pytest.raises(UpstreamError, match="HTTP 500, 3 attempt"):
        await make_backend(max_attempts=3).complete(backend="chat", node="n", messages=USER)
    assert attempts.outcomes == ["status"] * 3


def test_the_responses_answer_is_every_output_text_part_of_every_message() -> None:
    reply = {
        "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
            {"type": "message", "content": [{"type": "output_text", "text": "Hello, "}, {"type": "refusal"}]},
            {"type": "message", "content": [{"type": "output_text", "text": "world"}]},
        ],
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }
    text, usage = _read_reply("responses", reply)
    assert text == "Hello, world"
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (3, 2, 5)
    assert _read_reply("chat", {"choices": []}) == ("", Usage())
