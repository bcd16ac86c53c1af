"""Tests before publishing a prompt version: the test set answered with the candidate version beside the production
prompts (through an LLM, the simulator, since the offline rules use no prompt); a regression, or a version never
run, keeps the production label from it unless staff give a reason, which is recorded; a roll-back is not held."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import AsyncClient

from devtools.simulator.testing import SimulatorProcess
from prompts.catalogue import CATALOGUE, PRODUCTION
from prompts.errors import PromptPublishBlocked
from prompts.models import Prompt
from prompts.services import prompt_label_move, prompt_rollback, prompt_version_create
from rag.workflows.models import PromptCheck, PublishTest
from tests.llm_simulator import simulator_view

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER_PROMPT = "unified-agent-system"
# the answer prompt without its numbered sources: the model has nothing to cite
NO_SOURCES = CATALOGUE[ANSWER_PROMPT].template.replace("{{sources}}", "(none)")


@pytest.fixture
def simulated_llm(settings: Any, suite_simulator: SimulatorProcess) -> Iterator[SimulatorProcess]:
    from rag.wiring import reset_runtime

    simulator = simulator_view(suite_simulator, {"ttft_ms": 1, "tpot_ms": 1, "output_tokens": 40})
    settings.LLM_BASE_URL = simulator.base_url
    settings.LLM_API_KEY = "test"
    reset_runtime()
    try:
        yield simulator
    finally:
        reset_runtime()


@pytest.fixture
async def staff_async_client(staff_user: User) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(staff_user)
    return client


def versions(*templates: str) -> list[Prompt]:
    return [prompt_version_create(name=ANSWER_PROMPT, template=t, config=None) for t in templates]


async def test_a_prompt_version_that_loses_the_sources_needs_a_reason_to_become_production(
    simulated_llm: SimulatorProcess, staff_async_client: AsyncClient
) -> None:
    await PublishTest.objects.acreate(question="How do I reset my password?", must_cite=["en-password-reset"])
    [candidate] = await sync_to_async(versions)(NO_SOURCES)
    url = f"/api/v1/rag/workflows/prompts/{ANSWER_PROMPT}/{candidate.version}/check"

    checked = await staff_async_client.post(url, {"backend": "chat"}, content_type="application/json")

    assert checked.status_code == 200, checked.content
    [row] = checked.json()["results"]
    assert (row["draft_passed"], row["production_passed"]) == (False, True)
    assert row["draft_missing"] == ["source en-password-reset"]
    assert checked.json()["regressions"] == 1
    prompts_seen = [str(r["body"]) for r in simulated_llm.requests()]
    # the model read the candidate once, for the candidate's run only (production's answer comes from its own
    # prompt, or from the passages when its answer call is shed: either way it never sees the candidate)
    assert sum("Numbered sources:\\n(none)" in body for body in prompts_seen) == 1

    move = sync_to_async(prompt_label_move)
    with pytest.raises(PromptPublishBlocked, match="fails 1 test"):
        await move(name=ANSWER_PROMPT, label=PRODUCTION, version=candidate.version)
    moved = await move(
        name=ANSWER_PROMPT,
        label=PRODUCTION,
        version=candidate.version,
        override_reason="sources move to the user message next week",
        overridden_by="editor",
    )
    assert PRODUCTION in moved.labels
    check = await PromptCheck.objects.aget(prompt_name=ANSWER_PROMPT, prompt_version=candidate.version)
    assert (check.override_reason, check.overridden_by) == ("sources move to the user message next week", "editor")

    listed = await staff_async_client.get(url)
    assert listed.json()["tests"] == 1 and listed.json()["checks"][0]["override_reason"]


def test_without_a_test_set_a_version_is_published_as_before() -> None:
    [_, second] = versions("{{sources}} first", "{{sources}} second")
    assert PRODUCTION in prompt_label_move(name=ANSWER_PROMPT, label=PRODUCTION, version=second.version).labels
    assert PromptCheck.objects.count() == 0


def test_a_version_never_run_is_held_and_a_new_one_cannot_go_straight_to_production() -> None:
    PublishTest.objects.create(question="How do I reset my password?", must_cite=["en-password-reset"])
    [first] = versions("{{sources}} first")
    with pytest.raises(PromptPublishBlocked, match="has not been run"):
        prompt_label_move(name=ANSWER_PROMPT, label=PRODUCTION, version=first.version)
    with pytest.raises(PromptPublishBlocked, match="v2 has not been run"):
        prompt_version_create(name=ANSWER_PROMPT, template="{{sources}} second", config=None, labels=[PRODUCTION])
    assert Prompt.objects.filter(name=ANSWER_PROMPT).count() == 1  # the refused version was not created
    second = prompt_version_create(
        name=ANSWER_PROMPT, template="{{sources}} second", config=None, labels=[PRODUCTION], override_reason="typo fix"
    )
    assert PRODUCTION in second.labels
    assert PromptCheck.objects.get(prompt_version=second.version).override_reason == "typo fix"


def test_a_version_whose_check_has_no_regression_is_published_and_a_rollback_is_never_held() -> None:
    PublishTest.objects.create(question="How do I reset my password?", must_cite=["en-password-reset"])
    [first, second] = versions("{{sources}} first", "{{sources}} second")
    PromptCheck.objects.create(prompt_name=ANSWER_PROMPT, prompt_version=first.version, backend="chat", passed=1)
    PromptCheck.objects.create(prompt_name=ANSWER_PROMPT, prompt_version=second.version, backend="chat", passed=1)
    prompt_label_move(name=ANSWER_PROMPT, label=PRODUCTION, version=first.version)
    prompt_label_move(name=ANSWER_PROMPT, label=PRODUCTION, version=second.version)
    # the check of v1 regresses now (a newer run), yet rolling back to it is not held: it served before
    PromptCheck.objects.create(prompt_name=ANSWER_PROMPT, prompt_version=first.version, backend="chat", regressions=1)
    assert PRODUCTION in prompt_rollback(name=ANSWER_PROMPT).labels
    assert PRODUCTION in Prompt.objects.get(name=ANSWER_PROMPT, version=first.version).labels
