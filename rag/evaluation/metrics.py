"""What one answer scores against a SQuAD question's gold answers, and the figures of a whole run.

- containment: the answer's body (citations and the sources block left out) holds a gold answer;
- citation accuracy: of the answers that cite something, the share where a cited passage holds a gold answer;
- refusal: the pipeline's own refusal (not found, out of scope, no matching form: the reply texts of
  rag.rules.messages), told apart from an answer that says something without citing any passage ("uncited", a
  model answering from its own knowledge), and from an error;
- judge: with `--judge`, the mean scores of the answers judged, and how many judge calls failed and why (refusals
  and errors are not judged: there is nothing to grade);
- length: characters of the body; latency: from the request to the terminal event.

Texts are compared after NFKC, lower case and without white space, so "30 分鐘" meets "30分鐘" and a
full-width digit meets its ASCII twin.
"""

from __future__ import annotations

import re
import statistics
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rag.rules import messages
from rag.rules.answers import answer_body

_CITATION_RE = re.compile(r"\[\d+\]")
_SPACE_RE = re.compile(r"\s+")
_RELATED_LABELS = tuple(messages.text("related", language) for language in ("zh-hant", "en"))
_MARK = "\x00"


def _refusal_openings() -> tuple[str, ...]:
    """The opening words of every refusal reply, in both languages (up to the contact, which a deployment sets)."""
    openings = []
    for key in ("no_answer", "no_forms", "out_of_scope"):
        for language in ("zh-hant", "en"):
            text = messages.text(key, language, contact=_MARK)  # a text without {contact} ignores it
            openings.append(comparable(text.split(_MARK)[0])[:24])
    return tuple(openings)


@dataclass(slots=True)
class AnswerRecord:
    question_id: str
    question: str
    answer: str  # the whole answer, sources block included
    golds: tuple[str, ...]
    cited_passages: list[str]  # the text of every passage the answer cites
    latency_ms: float
    error: str = ""  # the terminal error's code, when the run failed
    judge: dict[str, Any] = field(default_factory=dict)

    @property
    def body(self) -> str:
        body = answer_body(self.answer)
        for label in _RELATED_LABELS:
            cut = body.find(label)
            if cut != -1:
                body = body[:cut]
        return body.strip()

    @property
    def cites(self) -> bool:
        return not self.error and bool(_CITATION_RE.search(self.body))

    @property
    def refused(self) -> bool:
        """The pipeline's refusal: one of its not-found / out-of-scope replies."""
        return not self.error and comparable(self.body).startswith(_refusal_openings())

    @property
    def outcome(self) -> str:
        """error, refused, cited, or uncited (an answer that cites no passage)."""
        if self.error:
            return "error"
        if self.refused:
            return "refused"
        return "cited" if self.cites else "uncited"

    @property
    def contains_gold(self) -> bool:
        return holds_any(_CITATION_RE.sub("", self.body), self.golds)

    @property
    def citation_correct(self) -> bool:
        return any(holds_any(passage, self.golds) for passage in self.cited_passages)


def comparable(text: str) -> str:
    return _SPACE_RE.sub("", unicodedata.normalize("NFKC", text).lower())


def holds_any(text: str, golds: Iterable[str]) -> bool:
    haystack = comparable(text)
    return any(gold_key and gold_key in haystack for gold_key in map(comparable, golds))


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank, as eval_retrieval reports its latencies."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]


def summarize(records: Sequence[AnswerRecord]) -> dict[str, Any]:
    """The run's figures (rounded to 4 decimals, latencies and lengths to 1)."""
    n = len(records)
    citing = [r for r in records if r.cites]
    outcomes = [r.outcome for r in records]
    lengths = [len(r.body) for r in records]
    latencies = [r.latency_ms for r in records]
    out: dict[str, Any] = {
        "questions": n,
        "containment": round(sum(r.contains_gold for r in records) / n, 4) if n else 0.0,
        "citation_accuracy": round(sum(r.citation_correct for r in citing) / len(citing), 4) if citing else 0.0,
        "refusal_rate": round(outcomes.count("refused") / n, 4) if n else 0.0,
        "uncited_rate": round(outcomes.count("uncited") / n, 4) if n else 0.0,
        "outcomes": {kind: outcomes.count(kind) for kind in ("cited", "uncited", "refused", "error")},
        "errors": outcomes.count("error"),
        "answer_chars_median": round(statistics.median(lengths), 1) if lengths else 0.0,
        "answer_chars_mean": round(statistics.fmean(lengths), 1) if lengths else 0.0,
        "latency_ms_p50": round(percentile(latencies, 0.5), 1),
        "latency_ms_p95": round(percentile(latencies, 0.95), 1),
    }
    if any(r.judge for r in records):  # judging was asked for: its figures, failures included, even all failed
        out["judge"] = judge_summary(records)
    return out


def judge_summary(records: Sequence[AnswerRecord]) -> dict[str, Any]:
    """How many answers were judged, skipped (refusals, errors) and failed (with the failures by kind), and the
    mean scores of those judged (None when none was)."""
    judged = [r.judge for r in records if r.judge.get("faithfulness") is not None]
    failures: dict[str, int] = {}
    for record in records:
        if record.judge.get("error"):
            failures[record.judge["error"]] = failures.get(record.judge["error"], 0) + 1
    return {
        "judged": len(judged),
        "failed": sum(failures.values()),
        "skipped": sum(1 for r in records if r.judge.get("skipped")),
        "failures": dict(sorted(failures.items())),
        "faithfulness": round(statistics.fmean(j["faithfulness"] for j in judged), 3) if judged else None,
        "relevance": round(statistics.fmean(j["relevance"] for j in judged), 3) if judged else None,
    }
