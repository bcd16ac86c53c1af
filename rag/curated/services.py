"""Writes of curated answers. Every write moves the curated answers' `StoreRevision` in its transaction and
publishes `CURATED_TOPIC` on the change feed after the commit, so every worker's copy (rag.curated.index, kept in
step by rag.replica) reloads within a second; the process that wrote reloads at once, after the commit.

Sync ORM: call from async code through a thread.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import transaction
from django.db.models import F

from infra.changefeed import publish_on_commit
from rag.curated.models import LANGUAGES, CuratedAnswer
from rag.models import StoreRevision

logger = logging.getLogger(__name__)

REVISION_NAME = "curated"
CURATED_TOPIC = "curated"
LANGUAGE_CODES = tuple(code for code, _label in LANGUAGES)


class CuratedInputError(ValueError):
    """Input a curated answer cannot be made of; the message names the field."""


def curated_revision_bump() -> None:
    """Move the revision inside the caller's transaction, and reload this process's copy once it commits."""
    StoreRevision.objects.get_or_create(name=REVISION_NAME)
    # the tag is new on every write: a copy compares it, so even a database started afresh (whose counter
    # restarts) is never mistaken for the one it loaded
    StoreRevision.objects.filter(name=REVISION_NAME).update(revision=F("revision") + 1, tag=uuid.uuid4().hex)
    transaction.on_commit(_reload_here)
    publish_on_commit(CURATED_TOPIC)


class Reloadable(Protocol):
    def sync(self) -> bool: ...


_active: list[Reloadable] = []


def curated_activate(index: Reloadable | None) -> None:
    """The copy this process serves from (rag.curated.index), reloaded at once after this process's writes."""
    _active.clear()
    if index is not None:
        _active.append(index)


def _reload_here() -> None:
    for index in list(_active):
        try:
            index.sync()
        except Exception:  # the change feed's handler tries again
            logger.exception("curated answers: reloading after a write failed")


def _checked(*, question: str, answer: str, language: str, url: str) -> None:
    if not question.strip():
        raise CuratedInputError("'question' is empty")
    if not answer.strip():
        raise CuratedInputError("'answer' is empty")
    if language not in LANGUAGE_CODES:
        raise CuratedInputError(f"'language' must be one of {', '.join(LANGUAGE_CODES)}, not {language!r}")
    if url:
        try:
            URLValidator(schemes=["http", "https"])(url)
        except ValidationError:
            raise CuratedInputError(f"'url' is not an http(s) link: {url!r}") from None


def curated_answer_create(
    *,
    question: str,
    answer: str,
    language: str = "zh-hant",
    url: str = "",
    title: str = "",
    topic: uuid.UUID | None = None,
    from_request_id: str = "",
    approved_by: str = "",
) -> CuratedAnswer:
    """Approve an answer for a question (a new variant of `topic` when given, replacing that topic's variant in
    the same language)."""
    _checked(question=question, answer=answer, language=language, url=url)
    with transaction.atomic():
        fields = {
            "question": question.strip(),
            "answer": answer.strip(),
            "source_url": url,
            "source_title": title.strip()[:300],
            "active": True,
            "from_request_id": from_request_id,
            "approved_by": approved_by,
        }
        if topic is not None:
            curated, _created = CuratedAnswer.objects.update_or_create(topic=topic, language=language, defaults=fields)
        else:
            curated = CuratedAnswer.objects.create(language=language, **fields)
        curated_revision_bump()
    return curated


def curated_answer_changed() -> None:
    """After an edit made elsewhere (the admin's form saves the row itself): tell every worker."""
    with transaction.atomic():
        curated_revision_bump()


def curated_answers_delete(*, ids: list[uuid.UUID]) -> int:
    with transaction.atomic():
        deleted = CuratedAnswer.objects.filter(pk__in=ids).delete()[1].get(CuratedAnswer._meta.label, 0)
        curated_revision_bump()
    return deleted


def curated_hits_record(*, hits: Mapping[str, tuple[int, datetime]]) -> int:
    """Add counted hits (id -> (count, last hit)); no revision bump: a hit changes nothing a worker serves."""
    updated = 0
    with transaction.atomic():
        for curated_id, (count, last) in hits.items():
            updated += CuratedAnswer.objects.filter(pk=curated_id).update(hits=F("hits") + count, last_hit_at=last)
    return updated
