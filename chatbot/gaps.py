"""Content gaps: the questions the content could not answer well, grouped into topics, kept up to date as they come.

A question is a gap when its answer was refused (nothing relevant), weakly supported (answered although retrieval
found no passage it judged relevant), or given a thumbs down. `gaps_update` takes in what arrived since it last ran
(two watermarks: the last answer and the last feedback looked at) and puts each question in the open topic it is
closest to, or in a new one:

- the deployment's embedder: cosine between the question's vector and the topic's centroid (the mean of its
  questions' vectors) at or above `threshold` (a multilingual embedder also groups across languages);
- the false-hit guard's lexicon of concepts (rag.semcache.guard), which names a concept the same way in every
  language ("certificate", "證書"): two or more concepts, most of them shared with a topic's, put an English and a
  Chinese question in one topic even with the offline lexical embedding.

Runs are serialised by a row lock on the watermarks, so every worker may call it (the gaps API does before it
answers, and the insights task every few minutes): the second caller waits and finds nothing new. Each run is one
transaction, a batch at most: a crash leaves the watermarks where they were. Sync ORM; blocking embedder calls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from chatbot.models import Feedback, GapTopic, Message
from rag.models import StoreRevision
from rag.semcache.cache import embed_key
from rag.semcache.guard import DEFAULT_KEY_TERMS, KeyTerms, features, question_normalize

logger = logging.getLogger(__name__)

MESSAGES_MARK = "gaps:messages"
FEEDBACK_MARK = "gaps:feedback"
DEFAULT_THRESHOLD = 0.6
CONCEPT_OVERLAP = 0.6
MAX_EXAMPLES = 5
MAX_CLOSEST = 10
REFUSED, WEAK, DISLIKED = "refused", "weak", "disliked"
_F32 = np.dtype("<f4")

Embed = Callable[[Sequence[str]], Sequence[Sequence[float]]]


@dataclass(slots=True)
class _Candidate:
    message_id: int
    question: str
    language: str
    asked_at: datetime
    reason: str
    closest: list[dict[str, Any]]


@dataclass(slots=True)
class _Topic:
    row: GapTopic
    total: np.ndarray | None  # sum of the unit vectors of its questions
    concepts: set[str] = field(default_factory=set)
    members: list[int] = field(default_factory=list)
    changed: bool = False
    slot: int = -1  # its row in the run's centroid matrix


def _mark(name: str) -> StoreRevision:
    StoreRevision.objects.get_or_create(name=name)
    return StoreRevision.objects.select_for_update().get(name=name)


def _candidates(messages_mark: StoreRevision, feedback_mark: StoreRevision, batch: int) -> list[_Candidate]:
    gap = Q(outcome=Message.Outcome.REFUSED) | Q(weak_support=True)
    newest = Message.objects.aggregate(top=Max("id"))["top"] or 0
    rows = list(
        Message.objects.filter(gap, role=Message.Role.ASSISTANT, background=False, id__gt=messages_mark.revision)
        .order_by("id")
        .values("id", "request_id", "language", "created_at", "closest", "outcome")[:batch]
    )
    messages_mark.revision = rows[-1]["id"] if len(rows) == batch else max(newest, messages_mark.revision)
    reasons = {row["id"]: REFUSED if row["outcome"] == Message.Outcome.REFUSED else WEAK for row in rows}
    disliked = list(
        Feedback.objects.filter(
            id__gt=feedback_mark.revision,
            kind=Feedback.Kind.THUMBS,
            score=0,
            message__background=False,
            message__gap_topic__isnull=True,
        )
        .order_by("id")
        .values_list("id", "message_id")[:batch]
    )
    if disliked:
        feedback_mark.revision = disliked[-1][0]
    more = [message_id for _id, message_id in disliked if message_id not in reasons]
    rows += list(
        Message.objects.filter(id__in=more).values("id", "request_id", "language", "created_at", "closest", "outcome")
    )
    reasons.update(dict.fromkeys(more, DISLIKED))
    asked = dict(
        Message.objects.filter(request_id__in=[row["request_id"] for row in rows], role=Message.Role.USER).values_list(
            "request_id", "content"
        )
    )
    return [
        _Candidate(
            row["id"],
            asked.get(row["request_id"], ""),
            row["language"] or "other",
            row["created_at"],
            reasons[row["id"]],
            list(row["closest"] or []),
        )
        for row in rows
        if asked.get(row["request_id"], "").strip()
    ]


def _open_topics(dim: int) -> list[_Topic]:
    topics = []
    for row in GapTopic.objects.filter(handled_at__isnull=True):
        total = None
        if row.centroid:
            vector = np.frombuffer(bytes(row.centroid), dtype=_F32)
            total = vector.copy() if len(vector) == dim else None
        topics.append(_Topic(row, total, set(row.concepts or [])))
    return topics


def _unit(vector: Sequence[float]) -> np.ndarray | None:
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return array / norm if norm > 0 else None


class _Grouper:
    """The open topics in memory for one run: the best topic of a question, by vector or by concepts. The matrix of
    unit centroids is kept in step row by row (a question moves one centroid; a new topic adds one row)."""

    def __init__(self, topics: list[_Topic], dim: int, threshold: float) -> None:
        self.topics = topics
        self.dim = dim
        self.threshold = threshold
        self._rows = max(16, 2 * len(topics))
        self._matrix = np.zeros((self._rows, dim), dtype=np.float32)
        for row, topic in enumerate(topics):
            topic.slot = row
            self._set_row(row, topic)
        self._by_concept: dict[str, set[int]] = {}
        for row, topic in enumerate(topics):
            for concept in topic.concepts:
                self._by_concept.setdefault(concept, set()).add(row)

    def _set_row(self, row: int, topic: _Topic) -> None:
        if topic.total is not None:
            self._matrix[row] = topic.total / max(float(np.linalg.norm(topic.total)), 1e-9)

    def place(self, vector: np.ndarray | None, concepts: set[str]) -> _Topic | None:
        count = len(self.topics)
        if not count:
            return None
        if vector is not None:
            scores = self._matrix[:count] @ vector
            best = int(np.argmax(scores))
            if float(scores[best]) >= self.threshold:
                return self.topics[best]
        if len(concepts) >= 2:
            rows = set().union(*(self._by_concept.get(concept, set()) for concept in concepts))
            shared = [
                (len(concepts & self.topics[r].concepts) / len(concepts | self.topics[r].concepts), r) for r in rows
            ]
            if shared:
                overlap, row = max(shared)
                if overlap >= CONCEPT_OVERLAP:
                    return self.topics[row]
        return None

    def new(self, topic: _Topic) -> None:
        topic.slot = len(self.topics)
        self.topics.append(topic)
        if len(self.topics) > self._rows:
            self._rows *= 2
            grown = np.zeros((self._rows, self.dim), dtype=np.float32)
            grown[: len(self.topics) - 1] = self._matrix[: len(self.topics) - 1]
            self._matrix = grown

    def add(self, topic: _Topic, vector: np.ndarray | None, concepts: set[str]) -> None:
        row = topic.slot
        if vector is not None:
            topic.total = vector.copy() if topic.total is None else topic.total + vector
            self._set_row(row, topic)
        for concept in concepts - topic.concepts:
            self._by_concept.setdefault(concept, set()).add(row)


def _record(topic: _Topic, candidate: _Candidate, concepts: set[str]) -> None:
    row = topic.row
    row.count += 1
    if candidate.reason == REFUSED:
        row.refused += 1
    elif candidate.reason == WEAK:
        row.weak += 1
    else:
        row.disliked += 1
    row.languages[candidate.language] = row.languages.get(candidate.language, 0) + 1
    if len(row.examples) < MAX_EXAMPLES and candidate.question not in row.examples:
        row.examples.append(candidate.question)
    for article in candidate.closest[:3]:
        key = str(article.get("doc_id") or article.get("url") or "")
        if not key:
            continue
        fresh = {"title": article.get("title", ""), "url": article.get("url", ""), "count": 0}
        seen = row.closest.setdefault(key, fresh)
        seen["count"] += 1
    if len(row.closest) > MAX_CLOSEST:
        kept = sorted(row.closest.items(), key=lambda item: -item[1]["count"])[:MAX_CLOSEST]
        row.closest = dict(kept)
    day = timezone.localdate(candidate.asked_at).isoformat()
    row.daily[day] = row.daily.get(day, 0) + 1
    row.first_seen = min(row.first_seen, candidate.asked_at)
    row.last_seen = max(row.last_seen, candidate.asked_at)
    topic.concepts |= concepts
    topic.members.append(candidate.message_id)
    topic.changed = True


def gaps_update(
    *,
    embed: Embed,
    dim: int,
    threshold: float = DEFAULT_THRESHOLD,
    batch: int = 5000,
    key_terms: KeyTerms = DEFAULT_KEY_TERMS,
) -> int:
    """Group the gap questions logged since the last run; how many were placed. `embed` is the deployment's
    embedder's `embed_documents` (vectors of `dim` floats)."""
    with transaction.atomic():
        messages_mark, feedback_mark = _mark(MESSAGES_MARK), _mark(FEEDBACK_MARK)
        candidates = _candidates(messages_mark, feedback_mark, batch)
        if candidates:
            _place_all(candidates, embed=embed, dim=dim, threshold=threshold, key_terms=key_terms)
        messages_mark.save(update_fields=["revision"])
        feedback_mark.save(update_fields=["revision"])
    if candidates:
        logger.info("content gaps: %d questions placed", len(candidates))
    return len(candidates)


def _place_all(candidates: list[_Candidate], *, embed: Embed, dim: int, threshold: float, key_terms: KeyTerms) -> None:
    normalized = [question_normalize(c.question) for c in candidates]
    vectors = [_unit(v) for v in embed([embed_key(n) for n in normalized])]
    grouper = _Grouper(_open_topics(dim), dim, threshold)
    for candidate, text, vector in zip(candidates, normalized, vectors, strict=True):
        concepts = {c for c in features(text, key_terms).concepts if not c.startswith("?")}
        topic = grouper.place(vector, concepts)
        if topic is None:
            row = GapTopic(
                label=candidate.question[:300],
                first_seen=candidate.asked_at,
                last_seen=candidate.asked_at,
                languages={},
                examples=[],
                closest={},
                daily={},
            )
            topic = _Topic(row, None)
            grouper.new(topic)
        grouper.add(topic, vector, concepts)
        _record(topic, candidate, concepts)
    for topic in grouper.topics:
        if not topic.changed:
            continue
        topic.row.concepts = sorted(topic.concepts)
        topic.row.centroid = topic.total.astype(_F32).tobytes() if topic.total is not None else None
        topic.row.save()
        Message.objects.filter(id__in=topic.members).update(gap_topic=topic.row)


# --- reading -----------------------------------------------------------------------------------------------------


def _trend(daily: dict[str, int], today: datetime) -> dict[str, Any]:
    day = timezone.localdate(today)
    last = sum(daily.get((day - timedelta(days=n)).isoformat(), 0) for n in range(7))
    before = sum(daily.get((day - timedelta(days=n)).isoformat(), 0) for n in range(7, 14))
    direction = "rising" if last > before else ("falling" if last < before else "steady")
    return {"last_7_days": last, "previous_7_days": before, "direction": direction}


def gap_impact(topic: GapTopic) -> int:
    """How much a topic matters: every question it holds, a thumbs down twice (someone was given a wrong answer)."""
    return topic.count + topic.disliked


def gaps_report(
    *, include_handled: bool = False, limit: int = 100, now: datetime | None = None
) -> list[dict[str, Any]]:
    """The topics, highest impact first, as the API and the admin show them."""
    topics = GapTopic.objects.all() if include_handled else GapTopic.objects.filter(handled_at__isnull=True)
    today = now or timezone.now()
    rows = sorted(topics.defer("centroid"), key=lambda t: (-gap_impact(t), -t.last_seen.timestamp()))[:limit]
    return [
        {
            "id": topic.pk,
            "topic": topic.label,
            "count": topic.count,
            "impact": gap_impact(topic),
            "reasons": {REFUSED: topic.refused, WEAK: topic.weak, DISLIKED: topic.disliked},
            "trend": _trend(topic.daily, today),
            "languages": topic.languages,
            "examples": topic.examples,
            "closest_articles": [
                {"doc_id": key, **value}
                for key, value in sorted(topic.closest.items(), key=lambda item: -item[1]["count"])[:3]
            ],
            "first_seen": topic.first_seen.isoformat(),
            "last_seen": topic.last_seen.isoformat(),
            "handled_at": topic.handled_at.isoformat() if topic.handled_at else None,
        }
        for topic in rows
    ]


def gap_topics_mark_handled(*, ids: Sequence[int], handled_by: str) -> int:
    """The content team dealt with these topics: they leave the report; new questions like them open a new one."""
    return GapTopic.objects.filter(pk__in=ids, handled_at__isnull=True).update(
        handled_at=timezone.now(), handled_by=handled_by
    )
