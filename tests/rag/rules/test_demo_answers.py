"""Offline answers through the whole default workflow on the demo index: questions worded unlike the article that
answers them, and procedures written as step sections."""

from __future__ import annotations

import re
from typing import Any

import pytest

from rag.deps import PipelineConfig, PipelineDeps
from rag.nodes import build_registry
from rag.rules.answers import answer_body
from rag.runtime import AskRequest, PipelineRuntime
from rag.state import PipelineState
from rag.workflows.default import default_workflow
from tests.rag.pipeline.conftest import demo_retriever  # noqa: F401 - a fixture, used by name


@pytest.fixture
def offline_runtime(demo_retriever: Any) -> PipelineRuntime:  # noqa: F811
    deps = PipelineDeps(retriever=demo_retriever, config=PipelineConfig())
    return PipelineRuntime(registry=build_registry(), deps_factory=lambda: deps, default_workflow=default_workflow())


async def ask(runtime: PipelineRuntime, question: str) -> PipelineState:
    run = await runtime.start(AskRequest(question=question))
    events = [event async for event in run.events()]
    assert [event["channel"] for event in events].count("meta_summary") == 1
    assert events[-1]["channel"] == "meta_summary"
    return run.state


async def test_when_hours_are_uploaded_is_answered_from_the_article_titled_with_that_question(
    offline_runtime: PipelineRuntime,
) -> None:
    # word for word, "公務人員終身學習時數與時數計算方式" shares more with the question (the portal's long name)
    state = await ask(offline_runtime, "學習時數要多久才會上傳到公務人員終身學習入口網站？")
    assert state.retrieved[0].doc_id == "zh-hours-reporting"
    assert [source.doc_id for source in state.sources] == ["zh-hours-reporting"]
    assert "一般情況下，時數會在課程完成後 3 個工作天內上傳完成" in answer_body(state.answer)


@pytest.mark.parametrize(
    ("question", "steps", "source"),
    [
        (
            "上完課但查不到研習時數，要怎麼檢查？",
            ["第一步：確認課程是否真的「已完成」", "第二步：查看上傳狀態", "第三步：確認是否使用了另一個帳號"],
            "zh-hours-missing",
        ),
        (
            "How do I find my missing learning hours?",
            [
                'Step 1: Is the course really "Completed"?',
                "Step 2: Check the reporting status",
                "Step 3: Did you use a different account?",
            ],
            "en-hours-missing",
        ),
    ],
)
async def test_a_procedure_written_as_step_sections_is_given_whole(
    offline_runtime: PipelineRuntime, question: str, steps: list[str], source: str
) -> None:
    state = await ask(offline_runtime, question)
    body = answer_body(state.answer)
    assert re.findall(r"^\*\*(.+)\*\*$", body, flags=re.MULTILINE) == steps
    assert [s.doc_id for s in state.sources] == [source]
