"""`manage.py eval_retrieval`: a tiny SQuAD file, its own temporary store, both output forms."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from rag.management.commands.eval_retrieval import gold_rank, percentile
from rag.retrieval.store import open_store_from_settings
from tests.rag.retrieval.fixtures.files import write_squad

REQUIRED = {
    "recall@1",
    "recall@5",
    "recall@10",
    "mrr",
    "query_ms_p50",
    "query_ms_p95",
    "index_seconds",
    "questions",
    "hits@1",
    "recall@1_even",
    "recall@1_odd",
}


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("eval_retrieval", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def squad_file(tmp_path: Path) -> Path:
    return write_squad(tmp_path / "tiny-set.json")


def test_json_is_one_object_with_the_agreed_keys(squad_file: Path) -> None:
    out, err = run(str(squad_file), "--json")
    result = json.loads(out)  # one object and nothing else on stdout
    assert set(result) >= REQUIRED
    assert result["questions"] == 5  # the unanswerable one is not asked
    assert result["documents"] == result["chunks"] == 4
    # five questions, four short paragraphs that share few words: each finds its own paragraph first
    assert result["recall@1"] == result["recall@5"] == result["recall@10"] == result["mrr"] == 1.0
    # questions 1, 3, 5 and 2, 4 in file order
    assert (result["hits@1"], result["recall@1_even"], result["recall@1_odd"]) == (5, 1.0, 1.0)
    assert 0 < result["query_ms_p50"] <= result["query_ms_p95"]
    assert result["index_seconds"] > 0
    assert result["mode"] == "sparse"
    assert "data[0].paragraphs[2]: no context text" in err
    # The progress of both stages is drawn on stderr (in place, with \r), ending full.
    assert "\rindexing [############################] 4/4 100%" in err
    assert "\rasking   [############################] 5/5 100%" in err


def test_table_output_and_options(squad_file: Path) -> None:
    out, _ = run(str(squad_file), "--k", "1,3", "--mode", "hybrid_rrf", "--limit-questions", "2")
    assert "4 paragraphs -> 4 chunks, 2 questions; mode hybrid_rrf" in out
    assert "recall@1   1.0000" in out
    assert "recall@3   1.0000" in out
    assert "recall@10" not in out
    assert "query ms    p50" in out


@pytest.mark.parametrize("mode", ["dense", "hybrid_rescore"])
def test_every_mode_runs(squad_file: Path, mode: str) -> None:
    result = json.loads(run(str(squad_file), "--json", "--mode", mode, "--k", "1,5,10")[0])
    assert result["mode"] == mode
    assert 0 <= result["recall@1"] <= result["recall@5"] <= result["recall@10"] <= 1


@pytest.mark.django_db(transaction=True)
def test_the_evaluation_has_a_store_of_its_own(squad_file: Path, private_index: str) -> None:
    # the live index (the deployment's, in the database) is neither read nor changed by an evaluation
    with open_store_from_settings() as live:
        result = json.loads(run(str(squad_file), "--json")[0])
        assert live.builds() == []
    assert result["questions"] == 5


def test_bad_input_is_a_command_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="no such file"):
        run(str(tmp_path / "missing.json"))
    (tmp_path / "notes.json").write_text('{"notes": []}', encoding="utf-8")
    with pytest.raises(CommandError, match="not SQuAD format"):
        run(str(tmp_path / "notes.json"))
    no_questions = {"data": [{"title": "t", "paragraphs": [{"context": "Some text.", "qas": []}]}]}
    (tmp_path / "no-qas.json").write_text(json.dumps(no_questions), encoding="utf-8")
    with pytest.raises(CommandError, match="no answerable questions"):
        run(str(tmp_path / "no-qas.json"))
    with pytest.raises(CommandError, match="--k"):
        run(str(tmp_path / "no-qas.json"), "--k", "one")


def test_gold_rank_counts_distinct_documents() -> None:
    assert gold_rank(["a", "a", "b", "c"], "c", depth=10) == 3
    assert gold_rank(["a", "a", "b", "c"], "c", depth=2) == 0
    assert gold_rank([], "c", depth=10) == 0
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.5) == 3.0
    assert percentile([float(v) for v in range(1, 101)], 0.95) == 95.0
