"""Capabilities negotiated, not assumed: against a simulator acting as a less capable server (its `refuse` fault,
as llama.cpp's server behaves), the backend steps a refused request down at once, within one attempt, remembers it
for the next calls, and never retries a refusal as if the server were overloaded."""

from __future__ import annotations

import json
from typing import Literal

import openai
import pytest

from devtools.simulator.testing import SimulatorProcess
from rag.errors import UpstreamError, UpstreamTimeout
from rag.llm import InvalidLLMOutput, StructuredOutput
from rag.llm.capabilities import ParameterRefused, PrefillSpeed, refused_parameter
from rag.llm.policy import _classify
from tests.llm_simulator import simulator_view
from tests.rag.llm.conftest import USER, AttemptLog, BackendFactory


class Plan(StructuredOutput):
    intent: Literal["simple_faq", "form_download", "out_of_scope"]
    should_retrieve: bool


PLAN_ASK = [{"role": "system", "content": "Plan the answer."}, {"role": "user", "content": "form download"}]


async def test_a_refused_json_schema_is_asked_again_as_json_object_in_the_same_attempt(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(refuse=["json_schema"])
    backend = make_backend()

    first = await backend.complete(backend="chat", node="planner", messages=PLAN_ASK, output=Plan)
    second = await backend.complete(backend="chat", node="planner", messages=PLAN_ASK, output=Plan)

    assert isinstance(first.parsed, Plan) and isinstance(second.parsed, Plan)
    # one attempt per call as the policy counts them: the step down is not a retry, and no backoff was slept
    assert attempts.outcomes == ["ok", "ok"]
    bodies = [request["body"] for request in await sim.arequests()]
    # the first call: refused as json_schema, then json_object with the schema; the second knows it already
    assert [body["response_format"]["type"] for body in bodies] == ["json_schema", "json_object", "json_object"]
    assert bodies[1]["response_format"]["schema"]["required"] == ["intent", "should_retrieve"]
    assert "JSON schema" in bodies[1]["messages"][0]["content"]
    stats = backend.profile.stats()
    assert stats["structured_output"] == {"chat": "json_object", "responses": "json_schema"}
    assert [(r["parameter"], r["status"]) for r in stats["refusals"]] == [("json_schema", 500)]


async def test_with_no_structured_output_at_all_the_schema_goes_in_the_prompt_and_the_reply_is_validated(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(refuse=["json_schema", "json_object"])
    backend = make_backend()

    # the simulator writes prose when no schema constrains it: the reply is checked, not trusted
    with pytest.raises(InvalidLLMOutput):
        await backend.complete(backend="chat", node="planner", messages=PLAN_ASK, output=Plan)

    assert attempts.count == 1
    bodies = [request["body"] for request in await sim.arequests()]
    assert [body.get("response_format", {}).get("type") for body in bodies] == ["json_schema", "json_object", None]
    schema_line = bodies[2]["messages"][0]["content"].split("JSON schema:\n", 1)[1]
    assert json.loads(schema_line)["properties"]["intent"]["enum"] == ["simple_faq", "form_download", "out_of_scope"]
    assert backend.profile.structured_mode("chat") == "prompt"


async def test_a_refused_stream_options_is_dropped_and_the_usage_is_estimated(
    make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(refuse=["stream_options"])
    backend = make_backend()

    answer, _reasoning, usage = await backend.stream_text(backend="chat", node="response_synth", messages=USER)
    await backend.stream_text(backend="chat", node="response_synth", messages=USER)

    assert answer
    assert usage.estimated and usage.input_tokens > 0 and usage.output_tokens > 0
    assert attempts.outcomes == ["ok", "ok"]
    bodies = [request["body"] for request in await sim.arequests()]
    assert ["stream_options" in body for body in bodies] == [True, False, False]
    assert backend.profile.stream_options is False


async def test_a_stream_without_usage_is_counted_as_estimated_never_as_zero(
    make_backend: BackendFactory, sim: SimulatorProcess
) -> None:
    # llama.cpp's server takes stream_options and sends no usage all the same
    await sim.afaults(refuse=["stream_usage"])
    backend = make_backend()

    answer, _reasoning, usage = await backend.stream_text(backend="chat", node="response_synth", messages=USER)

    assert answer
    assert usage.estimated
    assert usage.output_tokens > 0 and usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.as_dict()["estimated"] is True
    stats = backend.profile.stats()
    assert stats["stream_usage"] is False
    assert stats["tokenizer"] == ""  # the simulator has no tokenizer endpoint: asked once, then estimated


async def test_a_server_that_reports_usage_is_not_estimated(
    make_backend: BackendFactory, sim: SimulatorProcess
) -> None:
    _answer, _reasoning, usage = await make_backend().stream_text(backend="chat", node="response_synth", messages=USER)

    assert not usage.estimated and usage.output_tokens > 0
    assert "estimated" not in usage.as_dict()


@pytest.mark.parametrize("operation", ["stream", "complete"])
async def test_a_server_without_the_responses_api_is_named_and_not_retried(
    operation: str, make_backend: BackendFactory, sim: SimulatorProcess, attempts: AttemptLog
) -> None:
    await sim.afaults(refuse=["responses"])
    backend = make_backend(max_attempts=5)

    with pytest.raises(UpstreamError, match="no Responses API"):
        if operation == "stream":
            await backend.stream_text(backend="responses", node="response_synth", messages=USER)
        else:
            await backend.complete(backend="responses", node="planner", messages=PLAN_ASK, output=Plan)

    assert attempts.outcomes == ["refused"]
    assert len(await sim.arequests()) == 1
    assert backend.profile.responses_api is False


def _status_error(status: int, message: str) -> openai.APIStatusError:
    import httpx2

    request = httpx2.Request("POST", "http://llm.invalid/v1/chat/completions")
    response = httpx2.Response(status, request=request, json={"error": {"message": message}})
    return openai.APIStatusError(message, response=response, body={"message": message})


def test_a_refusal_is_told_from_an_overload_by_its_status_and_its_words() -> None:
    llama = _status_error(500, "Input should be 'text' or 'json_object'")
    assert refused_parameter(llama, ("response_format",)) == "response_format"
    assert refused_parameter(_status_error(400, "stream_options is not supported"), ("stream_options",))
    # overloaded or missing: never a refusal of a parameter, whatever the words
    assert refused_parameter(_status_error(503, "json_schema queue full"), ("response_format",)) is None
    assert refused_parameter(_status_error(500, "CUDA out of memory"), ("response_format",)) is None
    # the policy retries a 500, but never a refusal that nothing can step down
    assert _classify(llama).retryable
    assert not _classify(ParameterRefused("no", parameter="response_format", status=500)).retryable


def test_the_first_token_deadline_grows_with_the_prompt_once_the_prefill_speed_is_known() -> None:
    speed = PrefillSpeed(margin=2.0)
    assert speed.first_token_timeout(30.0, 4000) == 30.0  # nothing measured: the floor
    speed.observe(10, 5.0)  # a short prompt teaches nothing: fixed costs dominate
    assert speed.seconds_per_token is None
    speed.observe(1000, 20.0)  # a CPU server: 50 tokens a second
    assert speed.first_token_timeout(30.0, 1100) == pytest.approx(44.0)
    assert speed.first_token_timeout(30.0, 200) == 30.0  # never below the floor


def test_a_call_that_gave_up_before_its_first_token_raises_the_deadline_of_the_next() -> None:
    # a server slower than the floor would never finish a call to learn from: a timeout is a lower bound
    speed = PrefillSpeed(margin=2.0)
    speed.at_least(1000, 30.0)
    assert speed.first_token_timeout(30.0, 1000) == pytest.approx(60.0)
    speed.observe(1000, 40.0)  # then a finished call, between the two
    assert 30.0 / 1000 < (speed.seconds_per_token or 0.0) < 40.0 / 1000
    speed.at_least(1000, 1.0)  # a bound below what is known changes nothing
    assert (speed.seconds_per_token or 0.0) > 30.0 / 1000


@pytest.fixture
def slow_prefill_sim(sim: SimulatorProcess) -> SimulatorProcess:
    # 2 ms a prompt token: a 600-token prompt takes 1.2 s to its first token
    return simulator_view(sim, {"ttft_ms": 5, "prefill_ms_per_token": 2, "tpot_ms": 1, "output_tokens": 4})


async def test_a_long_prompt_gets_the_first_token_time_the_server_was_measured_to_need(
    make_backend: BackendFactory, slow_prefill_sim: SimulatorProcess
) -> None:
    long_ask = [{"role": "user", "content": "How do I reset my password? " * 80}]
    learned = make_backend(base_url=slow_prefill_sim.base_url, first_token_timeout=10.0)
    await learned.stream_text(backend="chat", node="response_synth", messages=long_ask)
    assert learned.profile.prefill.samples == 1

    # a floor below the prompt's prefill: the server that was measured gets the time; one never measured does not
    learned.config.first_token_timeout = 0.5
    answer, _reasoning, _usage = await learned.stream_text(backend="chat", node="response_synth", messages=long_ask)
    assert answer
    fresh = make_backend(base_url=slow_prefill_sim.base_url, first_token_timeout=0.5)
    with pytest.raises(UpstreamTimeout, match="sent nothing"):
        await fresh.stream_text(backend="chat", node="response_synth", messages=long_ask)
    # ... and learns from having given up: each ask gets twice the time the last one waited, until one is enough
    with pytest.raises(UpstreamTimeout, match=r"sent nothing for 1\.\d* s"):
        await fresh.stream_text(backend="chat", node="response_synth", messages=long_ask)
    answer, _reasoning, _usage = await fresh.stream_text(backend="chat", node="response_synth", messages=long_ask)
    assert answer
