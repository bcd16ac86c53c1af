"""Offline answers through the whole default workflow on the demo index: follow-ups in Traditional Chinese work
like English ones, and a how-to question gets its whole procedure."""

from __future__ import annotations

import re
from typing import Any

import pytest

from rag.deps import PipelineConfig, PipelineDeps
from rag.nodes import build_registry
from rag.rules.answers import answer_body
from rag.runtime import AskRequest, PipelineRuntime
from rag.state import PipelineState, Turn
from rag.workflows.default import default_workflow


@pytest.fixture
def offline_runtime(demo_retriever: Any) -> PipelineRuntime:
    deps = PipelineDeps(retriever=demo_retriever, config=PipelineConfig())
    return PipelineRuntime(registry=build_registry(), deps_factory=lambda: deps, default_workflow=default_workflow())


async def conversation(runtime: PipelineRuntime, *questions: str) -> list[PipelineState]:
    states: list[PipelineState] = []
    history: list[Turn] = []
    summary = ""
    for question in questions:
        run = await runtime.start(AskRequest(question=question, history=tuple(history), summary=summary))
        events = [event async for event in run.events()]
        assert events[-1]["channel"] == "meta_summary"
        states.append(run.state)
        history += [Turn("user", question), Turn("assistant", run.state.answer)]
        summary = run.state.new_summary
    return states


@pytest.mark.parametrize(
    ("first", "then", "expected", "source"),
    [
        ("候補名單怎麼運作？", "那要在多久內確認？", "48 小時內", "zh-waiting-list"),
        ("How does the waiting list work?", "How long do I have to confirm?", "48 hours", "en-waiting-list"),
    ],
)
async def test_a_follow_up_is_answered_from_the_topic_before(
    offline_runtime: PipelineRuntime, first: str, then: str, expected: str, source: str
) -> None:
    _, follow_up = await conversation(offline_runtime, first, then)
    body = answer_body(follow_up.answer)
    assert "抱歉" not in body and "Sorry" not in body
    assert expected in body  # the time limit to confirm an offered place, from the waiting-list article
    assert follow_up.sources[0].doc_id == source


async def test_how_to_reset_the_password_is_the_whole_procedure(offline_runtime: PipelineRuntime) -> None:
    (state,) = await conversation(offline_runtime, "如何重設密碼？")
    body = answer_body(state.answer)
    assert re.findall(r"^(\d)\. ", body, flags=re.MULTILINE) == ["1", "2", "3", "4", "5", "6"]
    assert "30 分鐘" in body and "長度至少 12 個字元" in body
    assert [source.doc_id for source in state.sources] == ["zh-password-reset"]
