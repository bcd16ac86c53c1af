"""`manage.py eval_answers`: a tiny SQuAD file asked through the product's pipeline, offline and with an LLM
judge (the simulator), stored as an evaluation run and printed as JSON."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from devtools.simulator.testing import SimulatorProcess
from prompts.catalogue import CATALOGUE, PRODUCTION
from prompts.services import prompt_cache_invalidate, prompt_version_create
from rag.evaluation.runner import JUDGE_PROMPT
from rag.models import AnswerEvaluation
from rag.retrieval.store import open_store_from_settings
from tests.llm_simulator import simulator_view
from tests.rag.retrieval.fixtures.files import write_squad

REQUIRED = {
    "questions",
    "containment",
    "citation_accuracy",
    "refusal_rate",
    "answer_chars_median",
    "latency_ms_p50",
    "latency_ms_p95",
    "producer",
    "evaluation_id",
}


def run(*args: str) -> dict[str, Any]:
    out, err = StringIO(), StringIO()
    call_command("eval_answers", *args, stdout=out, stderr=err)
    return dict(json.loads(out.getvalue()))  # one JSON object and nothing else on stdout


@pytest.fixture
def squad_file(tmp_path: Path) -> Path:
    return write_squad(tmp_path / "tiny-set.json")


@pytest.fixture
def judge_simulator(suite_simulator: SimulatorProcess) -> SimulatorProcess:
    return simulator_view(suite_simulator, {"ttft_ms": 1, "tpot_ms": 1, "output_tokens": 30})


@pytest.mark.django_db(transaction=True)
def test_offline_answers_are_scored_and_stored(squad_file: Path, private_index: str, settings: Any) -> None:
    settings.LLM_BASE_URL = ""
    with open_store_from_settings() as live:
        result = run(str(squad_file))
        assert live.builds() == []  # a store of its own: the live index is neither read nor written
    assert set(result) >= REQUIRED
    assert result["questions"] == 4  # neither the unanswerable question nor the one without a gold text
    assert result["producer"].startswith("chat/offline/")
    # extractive answers from four short paragraphs, each its own: every gold answer is quoted and cited
    assert result["containment"] == 1.0
    assert result["citation_accuracy"] == 1.0
    assert result["refusal_rate"] == 0.0
    assert result["answer_chars_median"] > 0
    assert 0 < result["latency_ms_p50"] <= result["latency_ms_p95"]
    assert "judge" not in result
    row = AnswerEvaluation.objects.get(pk=result["evaluation_id"])
    assert (row.dataset, row.questions, row.containment, row.faithfulness) == ("tiny-set.json", 4, 1.0, None)
    assert row.summary["producer"] == result["producer"]


@pytest.mark.django_db(transaction=True)
def test_a_question_whose_gold_is_not_quoted_counts_against_containment(
    tmp_path: Path, private_index: str, settings: Any
) -> None:
    settings.LLM_BASE_URL = ""
    data = {
        "data": [
            {
                "title": "Library",
                "paragraphs": [
                    {
                        "context": "A public library lends books free of charge to every resident with a card.",
                        "qas": [{"id": "x", "question": "Who can borrow books?", "answers": [{"text": "a dragon"}]}],
                    }
                ],
            }
        ]
    }
    result = run(str(write_squad(tmp_path / "wrong-gold.json", data)))
    assert (result["containment"], result["citation_accuracy"], result["refusal_rate"]) == (0.0, 0.0, 0.0)
    assert result["missed"][0]["id"] == "x"


@pytest.mark.django_db(transaction=True)
def test_judge_grades_every_answer_with_the_versioned_prompt(
    squad_file: Path, private_index: str, settings: Any, judge_simulator: SimulatorProcess
) -> None:
    spec = CATALOGUE[JUDGE_PROMPT]
    for note in ("first", "second"):  # staff edited the judge once: the run names the version it used
        prompt_version_create(
            name=JUDGE_PROMPT, template=spec.template, config=dict(spec.config), note=note, labels=[PRODUCTION]
        )
    prompt_cache_invalidate()
    settings.LLM_BASE_URL = judge_simulator.base_url
    settings.LLM_API_KEY = "test"
    settings.LLM_CHAT_MODEL = "sim-judge"
    result = run(str(squad_file), "--judge", "--limit-questions", "3")
    judge = result["judge"]
    assert judge["judged"] == 3 and judge["failed"] == 0
    assert 1 <= judge["faithfulness"] <= 5 and 1 <= judge["relevance"] <= 5
    assert result["judge_prompt_version"] == 2
    assert result["producer"].startswith("chat/sim-judge/")
    judge_calls = [r["body"] for r in judge_simulator.requests() if "You grade the answers" in json.dumps(r["body"])]
    assert len(judge_calls) == 3
    assert all(body["response_format"]["type"] == "json_schema" for body in judge_calls)
    row = AnswerEvaluation.objects.get(pk=result["evaluation_id"])
    assert row.faithfulness == judge["faithfulness"] and row.judge_prompt_version == 2


@pytest.mark.django_db(transaction=True)
def test_a_judge_failing_every_call_is_reported_with_its_failures(
    squad_file: Path, private_index: str, settings: Any, judge_simulator: SimulatorProcess
) -> None:
    # a server with no structured output at all, writing prose: every judgement is unusable
    judge_simulator.faults(refuse=["json_schema", "json_object"])
    settings.LLM_BASE_URL = judge_simulator.base_url
    settings.LLM_API_KEY = "test"
    result = run(str(squad_file), "--judge", "--limit-questions", "3")
    judge = result["judge"]
    assert (judge["judged"], judge["faithfulness"], judge["relevance"]) == (0, None, None)
    answered = result["outcomes"]["cited"] + result["outcomes"]["uncited"]
    assert judge["failed"] == answered > 0 and judge["failures"] == {"invalid_output": answered}
    assert judge["skipped"] == result["outcomes"]["refused"] + result["outcomes"]["error"]


def test_bad_input_is_a_command_error(tmp_path: Path, settings: Any) -> None:
    with pytest.raises(CommandError, match="no such file"):
        run(str(tmp_path / "missing.json"))
    (tmp_path / "notes.json").write_text('{"notes": []}', encoding="utf-8")
    with pytest.raises(CommandError, match="not SQuAD format"):
        run(str(tmp_path / "notes.json"))
    settings.LLM_BASE_URL = ""
    with pytest.raises(CommandError, match="--judge needs an LLM"):
        run(str(write_squad(tmp_path / "tiny.json")), "--judge")
