"""The publish test set filled from files and from good logged answers.

Files are the ones answer evaluation reads: SQuAD-format JSON (`manage.py eval_answers`,
``data[].paragraphs[].qas[]``) and the demo help centre's question file (`scripts/demo_questions.json`,
``questions[]`` of ``{"gold": [...], "en": [question, doc_id], "zh": [question, doc_id]}``).

A file's gold answers are alternatives (an answer holding any of them is right) while a test's `must_contain`
facts are all required, so a test takes one gold: the shortest, which the longer variants usually contain. Its
`must_cite` is the document that answers it: for SQuAD ``<file stem>/<article>/<paragraph>``, the id `reindex`
gives that paragraph when the file sits at the top of the indexed folder; `cite=False` leaves it empty for a file
whose paragraphs are indexed elsewhere.

Importing is all or nothing: a malformed file is a `TestFileError` naming the place (JSON line and column, or the
field's path) before anything is written, and the writes share one transaction. The same file imported twice
creates nothing: a question already in the test set (compared as the answer metrics compare text) is updated when
it came from the same file and differs, otherwise skipped with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction

from rag.evaluation.metrics import comparable
from rag.workflows.models import PublishTest

MAX_ORIGIN = 200


class TestFileError(ValueError):
    """The file cannot be imported; the message names the line or the field."""

    __test__ = False  # not a pytest class, whatever its name


@dataclass(frozen=True, slots=True)
class ImportedTest:
    question: str
    must_contain: list[str]
    must_cite: list[str]
    where: str  # the field path in the file, for the report


@dataclass(slots=True)
class ImportReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (where or question, reason)


@dataclass(slots=True)
class ParsedFile:
    tests: list[ImportedTest] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _shortest_gold(golds: Iterable[str]) -> str:
    distinct = {comparable(g): g.strip() for g in golds if g.strip()}
    return min(distinct.values(), key=len) if distinct else ""


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise TestFileError(f"{where}: expected a string, found {type(value).__name__}")
    return value.strip()


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise TestFileError(f"{where}: expected a list, found {type(value).__name__}")
    return value


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TestFileError(f"{where}: expected an object, found {type(value).__name__}")
    return value


def _squad_answers(qa: dict[str, Any], where: str) -> list[str]:
    answers = _list(qa.get("answers", []), f"{where}.answers")
    return [
        _text(_object(answer, f"{where}.answers[{i}]").get("text", ""), f"{where}.answers[{i}].text")
        for i, answer in enumerate(answers)
    ]


def _squad_paragraph(paragraph: Any, where: str, doc_id: str, *, cite: bool, out: ParsedFile) -> None:
    paragraph = _object(paragraph, where)
    has_context = isinstance(paragraph.get("context"), str) and bool(paragraph["context"].strip())
    for index, qa in enumerate(_list(paragraph.get("qas", []), f"{where}.qas")):
        at = f"{where}.qas[{index}]"
        qa = _object(qa, at)
        question = _text(qa.get("question"), f"{at}.question")
        if not question:
            raise TestFileError(f"{at}.question: empty")
        gold = _shortest_gold(_squad_answers(qa, at))
        if qa.get("is_impossible"):
            out.skipped.append((at, "unanswerable (is_impossible): no fact to require"))
        elif not gold:
            out.skipped.append((at, "no gold answer text"))
        elif cite and not has_context:
            out.skipped.append((at, "its paragraph has no context text, so it is not indexed and cannot be cited"))
        else:
            out.tests.append(ImportedTest(question, [gold], [doc_id] if cite else [], at))


def _parse_squad(articles: list[Any], *, stem: str, cite: bool) -> ParsedFile:
    out = ParsedFile()
    for a, article in enumerate(articles):
        paragraphs = _list(_object(article, f"data[{a}]").get("paragraphs"), f"data[{a}].paragraphs")
        for p, paragraph in enumerate(paragraphs):
            _squad_paragraph(paragraph, f"data[{a}].paragraphs[{p}]", f"{stem}/{a}/{p}", cite=cite, out=out)
    return out


def _parse_demo(items: list[Any], *, cite: bool) -> ParsedFile:
    out = ParsedFile()
    for index, item in enumerate(items):
        at = f"questions[{index}]"
        item = _object(item, at)
        golds = [_text(g, f"{at}.gold[{i}]") for i, g in enumerate(_list(item.get("gold"), f"{at}.gold"))]
        gold = _shortest_gold(golds)
        for language in ("en", "zh"):
            pair = _list(item.get(language), f"{at}.{language}")
            if len(pair) != 2:
                raise TestFileError(f"{at}.{language}: expected [question, doc_id], found {len(pair)} item(s)")
            question = _text(pair[0], f"{at}.{language}[0]")
            doc_id = _text(pair[1], f"{at}.{language}[1]")
            if not question:
                raise TestFileError(f"{at}.{language}[0]: empty question")
            if not gold:
                out.skipped.append((f"{at}.{language}", "no gold answer text"))
                continue
            out.tests.append(ImportedTest(question, [gold], [doc_id] if cite and doc_id else [], f"{at}.{language}"))
    return out


def parse_test_file(path: Path, *, cite: bool = True) -> ParsedFile:
    """The file's tests and the questions it skips, with reasons. TestFileError for a malformed file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise TestFileError(f"not UTF-8 text (byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise TestFileError(f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from exc
    if isinstance(data, dict) and "data" in data:
        return _parse_squad(_list(data["data"], "data"), stem=path.stem, cite=cite)
    if isinstance(data, dict) and "questions" in data:
        return _parse_demo(_list(data["questions"], "questions"), cite=cite)
    raise TestFileError(
        'neither SQuAD format (an object with a "data" list) nor a question file (an object with a "questions" list)'
    )


def _apply(test: ImportedTest, existing: PublishTest | None, origin: str, report: ImportReport) -> None:
    if existing is None:
        PublishTest.objects.create(
            question=test.question, must_contain=test.must_contain, must_cite=test.must_cite, origin=origin
        )
        report.created.append(test.question)
    elif existing.origin != origin:
        report.skipped.append((test.where, f"already in the test set (from {existing.origin or 'the admin'})"))
    elif (existing.must_contain, existing.must_cite) == (test.must_contain, test.must_cite):
        report.skipped.append((test.where, "unchanged"))
    else:
        existing.must_contain, existing.must_cite = test.must_contain, test.must_cite
        existing.save(update_fields=["must_contain", "must_cite"])
        report.updated.append(test.question)


def publish_tests_import(parsed: ParsedFile, *, origin: str) -> ImportReport:
    """Write the parsed tests in one transaction; a question already present is updated or skipped, never
    duplicated (a question repeated within the file counts once)."""
    origin = origin[:MAX_ORIGIN]
    report = ImportReport(skipped=list(parsed.skipped))
    with transaction.atomic():
        known = {comparable(t.question): t for t in PublishTest.objects.select_for_update().order_by("id")}
        seen: dict[str, str] = {}
        for test in parsed.tests:
            key = comparable(test.question)
            if key in seen:
                report.skipped.append((test.where, f"repeats the question of {seen[key]}"))
                continue
            seen[key] = test.where
            _apply(test, known.get(key), origin, report)
    return report


def publish_test_from_answer(*, question: str, sources: list[Any], request_id: str) -> PublishTest | None:
    """A test from a good logged answer: its question, its sources as `must_cite` (document ids, or links when a
    source has no id), `must_contain` left for staff to fill (which of an answer's sentences is the fact that
    matters is their call). None when the question is already in the set, or the answer cites nothing (a test
    requiring nothing would pass whatever the workflow says)."""
    refs = (str(s.get("doc_id") or s.get("url") or "") for s in sources if isinstance(s, dict))
    cite = list(dict.fromkeys(ref for ref in refs if ref))
    key = comparable(question)
    if not key or not cite:
        return None
    if any(comparable(q) == key for q in PublishTest.objects.values_list("question", flat=True)):
        return None
    return PublishTest.objects.create(question=question.strip(), must_cite=cite, origin=f"request {request_id}")
