"""The LLM side against llama.cpp's real server (llama-cpp-python, Qwen2.5-Coder-0.5B on the CPU): what the product
learns of a server it did not write, and how it behaves with it. Asserts the product's behaviour (plans parse,
refusals, usage, a degraded answer on a kill, readiness), never the model's wording.

The pipeline runs in-process with the configuration's defaults (timeouts, retries) and one LLM slot, as
llama-cpp-python's server decodes one request at a time; retrieval is the demo index's lexical search, so which
questions find passages does not depend on the embedding server.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from django.test import AsyncClient

from chatbot import readiness
from concurrency.manager import LLMConcurrencyManager, set_manager
from devtools.simulator.testing import free_port
from rag.deps import PipelineConfig, PipelineDeps
from rag.evaluation.metrics import AnswerRecord
from rag.events import Event
from rag.llm import LLMBackend, LLMConfig
from rag.llm.client import aclose_clients
from rag.nodes import build_registry
from rag.nodes.planner import Planner
from rag.prompting.prompts import CataloguePrompts
from rag.runtime import AskRequest, PipelineRuntime
from rag.workflows.default import default_workflow
from scripts.real_models import LLAMA_MODEL_ALIAS, Layout, ModelServer, llama_command
from tests.rag.llm.conftest import AttemptLog, attempts  # noqa: F401 - fixture, used by name
from tests.rag.nodes.support import make_state, make_writer
from tests.rag.pipeline.conftest import check_stream, demo_retriever  # noqa: F401 - fixture, used by name

pytestmark = pytest.mark.django_db(transaction=True)

# Ten help-centre asks of every intent, English and Chinese.
PLAN_ASKS = (
    "How do I reset my password?",
    "如何重設密碼？",
    "Where can I download the course refund application form?",
    "我要下載學習時數證明申請表",
    "Export all the forms as a CSV file",
    "What is the weather in Taipei tomorrow?",
    "How many learning hours does a civil servant need each year?",
    "帳號被鎖定怎麼辦？",
    "Can I enrol in two courses at the same time?",
    "課程證書要怎麼列印？",
)
# Off-topic or unanswerable from the help centre: the offline rules refuse every one.
REFUSED_ASKS = (
    "Who won the 2022 FIFA World Cup?",
    "Write me a poem about the sea",
    "What is the capital of Australia?",
    "How do I cook beef noodle soup?",
    "Which stocks should I buy this year?",
)


def llama_for_this_machine(layout: Layout) -> ModelServer:
    """llama.cpp's server with two threads on a quiet machine (CI runs this suite after the others), one on a
    loaded one: there (load 20 on 2 cores) two threads spinning on each other ran at 0.2 tokens a second against
    3-4 with one."""
    port = free_port()
    threads = 2 if os.getloadavg()[0] < 1.5 else 1
    return ModelServer("llama", llama_command(layout, port, context=4096, threads=threads), port).start()


@pytest.fixture(scope="module")
def llama_server(real_models: Layout) -> Iterator[ModelServer]:
    server = llama_for_this_machine(real_models)
    yield server
    server.stop()


@pytest.fixture
async def one_slot() -> AsyncIterator[LLMConcurrencyManager]:
    manager = LLMConcurrencyManager({"default": 1, "chat": 1, "responses": 1, "embedding": 1}, acquire_timeout=300.0)
    set_manager(manager)
    yield manager
    set_manager(None)
    await aclose_clients()


def backend_for(server: ModelServer, *, first_token_timeout: float = 30.0, total_timeout: float = 120.0) -> LLMBackend:
    """The backend the wiring builds from LLM_BASE_URL and LLM_CHAT_MODEL, every other setting at its default
    unless given (as LLM_FIRST_TOKEN_TIMEOUT and LLM_REQUEST_TIMEOUT would set them)."""
    config = LLMConfig(
        base_url=server.base_url,
        api_key="none",
        chat_model=LLAMA_MODEL_ALIAS,
        first_token_timeout=first_token_timeout,
        total_timeout=total_timeout,
    )
    return LLMBackend(config)


# What a loaded two-core machine needs: llama.cpp read 11 prompt tokens a second there, so an answer's prompt takes
# minutes before its first token (the learned deadline gets there too, after a few asks given up).
PATIENT: dict[str, float] = {"first_token_timeout": 600.0, "total_timeout": 900.0}


def runtime_for(llm: LLMBackend, retriever: Any) -> PipelineRuntime:
    deps = PipelineDeps(retriever=retriever, config=PipelineConfig(), llm=llm, prompts=CataloguePrompts())
    # silent for as long as one LLM call may take, as the wiring sets it (pipeline_idle_timeout)
    idle = llm.config.total_timeout + 5.0
    return PipelineRuntime(
        registry=build_registry(),
        deps_factory=lambda: deps,
        default_workflow=default_workflow(),
        stream_timeout=idle + 300,
        idle_timeout=idle,
    )


async def ask(runtime: PipelineRuntime, question: str) -> list[Event]:
    run = await runtime.start(AskRequest(question=question))
    return [event async for event in run.events()]


@pytest.mark.xfail(
    reason="met on a quiet machine (CI's rehearsal: 9 of 10, the first call timed out before the server's speed was "
    "learned); on a loaded 2-core machine most plans outrun the planner's 10 s bound (0 of 4 there)",
    strict=False,
)
async def test_plans_come_from_the_model_in_one_attempt_each(
    llama_server: ModelServer,
    one_slot: LLMConcurrencyManager,
    attempts: AttemptLog,  # noqa: F811
) -> None:
    llm = backend_for(llama_server)
    planner = Planner(llm=llm, prompts=CataloguePrompts())
    sources = []
    for question in PLAN_ASKS:
        language = "zh-hant" if any("\u4e00" <= char <= "\u9fff" for char in question) else "en"
        state = make_state(question, normalized_question=question, language=language)
        await planner.run(state, make_writer()[0])
        sources.append(state.plan_source)

    from_model = sources.count("llm")
    print(f"\nplans from the model: {from_model} of {len(PLAN_ASKS)}; attempts: {attempts.outcomes}")
    assert from_model >= 9, sources
    assert attempts.count == len(PLAN_ASKS), attempts.outcomes  # one attempt per call, the step down included
    learned = llm.profile.stats()
    # llama-cpp-python refuses json_schema (HTTP 500): learned on the first call, json_object with the schema since
    assert learned["structured_output"]["chat"] == "json_object"
    assert [r["parameter"] for r in learned["refusals"]] == ["json_schema"]


@pytest.mark.xfail(
    reason="met on a quiet machine (CI's rehearsal: 5 of 5); on a loaded one 4 of 5 were refused before the "
    "relevance check judged questions by their own words",
    strict=False,
)
async def test_off_topic_questions_are_refused_without_the_model_answering(
    llama_server: ModelServer,
    one_slot: LLMConcurrencyManager,
    demo_retriever: Any,  # noqa: F811
) -> None:
    llm = backend_for(llama_server, **PATIENT)
    runtime = runtime_for(llm, demo_retriever)
    refused = 0
    for question in REFUSED_ASKS:
        events = await ask(runtime, question)
        summary = check_stream(events)
        assert summary["channel"] == "meta_summary", summary
        answer = "".join(e["delta"] for e in events if e["channel"] == "answer")
        record = AnswerRecord("q", question, answer, (), [], 0.0)
        generated = [e for e in events if e["channel"] == "status" and e.get("answer_source") == "llm"]
        refused += record.outcome == "refused" and not generated
    print(f"\nrefused: {refused} of {len(REFUSED_ASKS)}")
    assert refused == len(REFUSED_ASKS)


async def test_an_answer_carries_its_usage_counted_with_the_servers_tokenizer(
    llama_server: ModelServer,
    one_slot: LLMConcurrencyManager,
    demo_retriever: Any,  # noqa: F811
) -> None:
    llm = backend_for(llama_server, **PATIENT)
    runtime = runtime_for(llm, demo_retriever)
    events = await ask(runtime, "How do I reset my password?")
    summary = check_stream(events)
    assert summary["channel"] == "meta_summary" and not summary["degraded"], summary
    assert any(e["channel"] == "status" and e.get("answer_source") == "llm" for e in events)
    usage = summary["usage"]
    # llama.cpp streams no usage: counted with its tokenizer endpoint, and marked so
    assert usage["output_tokens"] > 0 and usage["estimated"] is True, usage
    learned = llm.profile.stats()
    assert learned["stream_usage"] is False and learned["tokenizer"] == "/extras/tokenize/count"
    assert learned["prefill_samples"] >= 1
    print(f"\nprefill measured: {learned['prefill_ms_per_1k_tokens']} ms per 1k prompt tokens")


async def test_killing_the_server_mid_answer_gives_a_flagged_degraded_answer(
    real_models: Layout,
    one_slot: LLMConcurrencyManager,
    demo_retriever: Any,  # noqa: F811
) -> None:
    server = llama_for_this_machine(real_models)
    try:
        runtime = runtime_for(backend_for(server, **PATIENT), demo_retriever)
        run = await runtime.start(AskRequest(question="How do I reset my password?"))
        events: list[Event] = []
        async for event in run.events():
            events.append(event)
            if event["channel"] == "answer" and server.process is not None and server.process.poll() is None:
                await asyncio.to_thread(server.kill)  # after the model's first words
    finally:
        server.kill()

    summary = check_stream(events)
    assert summary["channel"] == "meta_summary", (summary.get("code"), summary.get("message"))  # no upstream_error
    assert summary["degraded"] is True
    [notice] = [e for e in events if e["channel"] == "status" and e.get("answer_source") == "degraded"]
    assert notice["mid_answer"] is True
    assert summary["sources"]  # finished from the passages, cited


async def test_ready_names_the_missing_responses_api(llama_server: ModelServer, settings: Any) -> None:
    settings.LLM_BASE_URL = llama_server.base_url
    readiness.reset_for_tests()
    try:
        response = await AsyncClient().get("/api/v1/ready")
    finally:
        readiness.reset_for_tests()
    body = response.json()
    assert response.status_code == 503, body
    assert body["error"]["failing"] == ["llm_responses"], body["checks"]
    assert "no Responses API" in body["checks"]["llm_responses"]["detail"]
    assert body["checks"]["llm"]["ok"]
