"""What one answer scores: containment after normalisation, citations, refusals; the run's figures."""

from __future__ import annotations

import pytest
from django.urls import reverse

from rag.evaluation.metrics import AnswerRecord, holds_any, summarize
from rag.models import AnswerEvaluation
from rag.rules import messages


def record(
    answer: str, golds: tuple[str, ...] = ("1908年",), passages: tuple[str, ...] = (), **kw: object
) -> AnswerRecord:
    return AnswerRecord("q", "?", answer, golds, list(passages), latency_ms=kw.pop("latency", 10.0), **kw)  # type: ignore[arg-type]


def test_containment_ignores_width_case_spaces_and_citations() -> None:
    assert holds_any("西部幹線於１９０８ 年全線通車", ["1908年"])
    assert record("西部幹線於1908[1]年全線通車。\n\n資料來源：\n[1] 鐵路 (u)").contains_gold
    assert not record("西部幹線全線通車[1]。\n\n資料來源：\n[1] 1908年 (u)").contains_gold  # only in the sources
    assert not holds_any("anything", ["", "  "])


def test_refusals_are_told_apart_from_answers_without_citations_and_from_errors() -> None:
    not_found = messages.text("no_answer", "zh-hant", contact="x")
    related = f"{not_found}\n\n{messages.text('related', 'zh-hant')}\n[1] 鐵路 (u)"
    assert record(related).outcome == "refused"
    assert record(messages.text("out_of_scope", "en")).outcome == "refused"
    assert record(messages.text("no_forms", "en", contact="call us")).outcome == "refused"
    assert record("An error", error="upstream_error").outcome == "error"
    assert record("西部幹線於1908年全線通車[1]。").outcome == "cited"
    # a model answering from what it knows: no refusal, and nothing cited
    assert record("France won the 2022 World Cup.").outcome == "uncited"


def test_summary_counts_citation_accuracy_over_citing_answers_only() -> None:
    records = [
        record("於1908年通車[1]。", passages=("1908年全線通車",), latency=10.0),
        record("於1908年通車[1]。", passages=("別的段落",), latency=30.0),
        record(messages.text("no_answer", "en", contact="x"), latency=20.0),
    ]
    out = summarize(records)
    assert out["questions"] == 3
    assert out["containment"] == round(2 / 3, 4)
    assert out["citation_accuracy"] == 0.5
    assert out["refusal_rate"] == round(1 / 3, 4) and out["uncited_rate"] == 0.0
    assert out["outcomes"] == {"cited": 2, "uncited": 0, "refused": 1, "error": 0}
    assert out["latency_ms_p50"] == 20.0
    assert "judge" not in out
    records[0].judge = {"faithfulness": 5, "relevance": 4, "reason": "ok"}
    records[1].judge = {"error": "invalid_output"}
    records[2].judge = {"skipped": "refused"}
    assert summarize(records)["judge"] == {
        "judged": 1,
        "failed": 1,
        "skipped": 1,
        "failures": {"invalid_output": 1},
        "faithfulness": 5.0,
        "relevance": 4.0,
    }


def test_a_judge_that_failed_every_call_still_reports_its_figures() -> None:
    records = [record("於1908年通車[1]。"), record("於1908年通車[2]。")]
    for r in records:
        r.judge = {"error": "upstream_error"}
    judge = summarize(records)["judge"]
    assert (judge["judged"], judge["failed"], judge["failures"]) == (0, 2, {"upstream_error": 2})
    assert judge["faithfulness"] is None and judge["relevance"] is None


@pytest.mark.django_db
def test_runs_are_listed_in_the_admin(admin_client: object) -> None:
    AnswerEvaluation.objects.create(
        dataset="DRCD_dev.json",
        producer="chat/offline/abc",
        questions=3524,
        containment=0.8255,
        citation_accuracy=0.97,
        refusal_rate=0.01,
        answer_chars_median=150,
        latency_ms_p50=5.6,
        latency_ms_p95=15.5,
    )
    response = admin_client.get(reverse("admin:rag_answerevaluation_changelist"))  # type: ignore[attr-defined]
    assert response.status_code == 200
    assert "DRCD_dev.json" in response.content.decode() and "chat/offline/abc" in response.content.decode()
