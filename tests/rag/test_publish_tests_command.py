"""`manage.py publish_tests import FILE` and `list`: the publish test set from eval_answers' SQuAD files and the
demo question file; idempotent, all or nothing, a bad file named by line or field."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from rag.workflows.models import PublishTest
from tests.rag.retrieval.fixtures.files import SQUAD, write_squad

pytestmark = pytest.mark.django_db

DEMO_QUESTIONS = Path(__file__).resolve().parents[2] / "scripts" / "demo_questions.json"


def run(*args: str) -> list[str]:
    out = StringIO()
    call_command("publish_tests", *args, stdout=out)
    return out.getvalue().splitlines()


def test_a_squad_file_becomes_tests_with_its_gold_and_paragraph(tmp_path: Path) -> None:
    lines = run("import", str(write_squad(tmp_path / "tiny-set.json")))
    assert lines[-1] == "4 created, 0 updated, 2 skipped"
    assert "skipped data[1].paragraphs[0].qas[1]: unanswerable (is_impossible): no fact to require" in lines
    assert "skipped data[1].paragraphs[1].qas[0]: no gold answer text" in lines
    test = PublishTest.objects.get(question="高速鐵路的最高營運速度是多少？")
    assert (test.must_contain, test.must_cite, test.origin) == (["300"], ["tiny-set/0/1"], "file tiny-set.json")


def test_importing_the_same_file_twice_creates_nothing_new(tmp_path: Path) -> None:
    path = write_squad(tmp_path / "tiny-set.json")
    run("import", str(path))
    again = run("import", str(path))
    assert again[-1] == "0 created, 0 updated, 6 skipped"
    assert "skipped data[0].paragraphs[0].qas[0]: unchanged" in again
    assert PublishTest.objects.count() == 4


def test_a_changed_gold_updates_the_test_from_the_same_file(tmp_path: Path) -> None:
    path = write_squad(tmp_path / "tiny-set.json")
    run("import", str(path))
    changed: dict[str, Any] = json.loads(json.dumps(SQUAD))
    changed["data"][0]["paragraphs"][1]["qas"][0]["answers"] = [{"text": "每小時300公里"}, {"text": "300公里"}]
    lines = run("import", str(write_squad(path, changed)))
    assert lines[-1] == "0 created, 1 updated, 5 skipped"
    # alternatives: the shortest is required, the longer ones hold it
    assert PublishTest.objects.get(question="高速鐵路的最高營運速度是多少？").must_contain == ["300公里"]


def test_a_question_already_added_from_elsewhere_is_skipped_not_overwritten(tmp_path: Path) -> None:
    PublishTest.objects.create(question="Who can borrow books  for FREE?", must_contain=["card"], origin="request r1")
    lines = run("import", str(write_squad(tmp_path / "tiny-set.json")))
    assert "skipped data[1].paragraphs[0].qas[0]: already in the test set (from request r1)" in lines
    assert PublishTest.objects.get(origin="request r1").must_contain == ["card"]
    assert PublishTest.objects.count() == 4


def test_the_demo_question_file_gives_a_test_per_language() -> None:
    lines = run("import", str(DEMO_QUESTIONS))
    assert lines[-1] == "20 created, 0 updated, 0 skipped"
    test = PublishTest.objects.get(question="候補遞補後要在多久內確認？")
    assert (test.must_contain, test.must_cite) == (["48"], ["zh-waiting-list"])


def test_no_cite_leaves_the_sources_to_staff(tmp_path: Path) -> None:
    run("import", str(write_squad(tmp_path / "tiny-set.json")), "--no-cite")
    assert list(PublishTest.objects.values_list("must_cite", flat=True)) == [[], [], [], []]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"data": [\n  {"paragraphs": [}\n]}', "not valid JSON (line 2, column 19"),
        ('{"data": [{"paragraphs": [{"context": "x", "qas": [{"question": 3}]}]}]}', "qas[0].question: expected a"),
        (
            '{"data": [{"paragraphs": [{"context": "x", "qas": [{"question": "q", "answers": "yes"}]}]}]}',
            "data[1].paragraphs[0].qas[0].answers: expected a list, found str",
        ),
        ('{"questions": [{"gold": ["1"], "en": ["q"], "zh": ["q", "d"]}]}', "questions[0].en: expected [question"),
        ("[1, 2]", "neither SQuAD format"),
    ],
)
def test_a_bad_file_names_the_place_and_writes_nothing(tmp_path: Path, content: str, message: str) -> None:
    good = {"context": "c", "qas": [{"question": "A good question?", "answers": [{"text": "c"}]}]}
    path = tmp_path / "bad.json"
    # a good question before the bad one: were it written before the error, the count below would show it
    if content.startswith('{"data": [{'):
        data = json.loads(content)
        data["data"].insert(0, {"paragraphs": [good]})
        content = json.dumps(data)
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CommandError) as raised:
        run("import", str(path))
    assert message in str(raised.value) and "nothing imported" in str(raised.value)
    assert PublishTest.objects.count() == 0


def test_list_shows_the_active_tests_and_all_with_all(tmp_path: Path) -> None:
    run("import", str(write_squad(tmp_path / "tiny-set.json")))
    PublishTest.objects.filter(question="西部幹線連接哪兩個城市？").update(active=False)
    active = run("list")
    assert active[-1] == "3 test(s)"
    assert "    must cite: tiny-set/0/0" in active and not any("西部幹線連接" in line for line in active)
    everything = run("list", "--all")
    assert everything[-1] == "4 test(s)"
    assert any(line.endswith("(inactive) 西部幹線連接哪兩個城市？") for line in everything)


@pytest.mark.django_db(transaction=True)
def test_check_draft_prints_the_verdicts_stores_the_check_and_fails_on_a_regression() -> None:
    from rag.workflows import services
    from rag.workflows.models import PublishCheck
    from tests.rag.workflows.test_publish_checks import no_retrieval_graph

    PublishTest.objects.create(question="How do I reset my password?", must_cite=["en-password-reset"])
    draft = services.workflow_draft_create(name="no-retrieval", graph=no_retrieval_graph())
    out = StringIO()
    with pytest.raises(CommandError, match="1 regression"):
        call_command("publish_tests", "check-draft", str(draft.pk), stdout=out)
    assert out.getvalue().splitlines() == [
        "How do I reset my password?: FAIL (missing source en-password-reset); production pass",
        "0 passed, 1 failed, 1 regression(s)",
    ]
    assert PublishCheck.objects.get(draft=draft).regressions == 1


@pytest.mark.django_db(transaction=True)
def test_check_prompt_offline_answers_alike_so_the_version_may_be_published() -> None:
    from prompts.catalogue import CATALOGUE, PRODUCTION
    from prompts.services import prompt_label_move, prompt_version_create

    PublishTest.objects.create(question="How do I reset my password?", must_cite=["en-password-reset"])
    name = "unified-agent-system"
    version = prompt_version_create(name=name, template=CATALOGUE[name].template + "\nBe brief.", config=None)
    # the offline rules use no prompt: both sides answer alike, and a check without regression lets it through
    assert run("check-prompt", name, str(version.version))[-1] == "1 passed, 0 failed, 0 regression(s)"
    assert PRODUCTION in prompt_label_move(name=name, label=PRODUCTION, version=version.version).labels
    with pytest.raises(CommandError, match="prompt 'unified-agent-system' has no version 99"):
        run("check-prompt", name, "99")
    with pytest.raises(CommandError, match="no workflow draft 12345"):
        run("check-draft", "12345")
