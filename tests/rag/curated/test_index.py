"""The curated answers' copy: the cache's match and guard, language variants, reloads on every write, hits."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from rag.curated.index import CuratedAnswers
from rag.curated.models import CuratedAnswer
from rag.curated.services import curated_answer_changed, curated_answer_create
from rag.retrieval.embedding import LexicalEmbedder
from tests.waiting import until_async

pytestmark = pytest.mark.django_db(transaction=True)


def _answers(**kwargs) -> CuratedAnswers:
    curated = CuratedAnswers(embedder=LexicalEmbedder(dim=256), **kwargs)
    curated.sync()
    return curated


async def _lookup(curated: CuratedAnswers, question: str, language: str):
    return await curated.lookup(question, language=language)


async def test_a_paraphrase_matches_and_a_question_the_guard_tells_apart_does_not() -> None:
    await sync_to_async(curated_answer_create)(
        question="How do I reset my password?", answer="Use the Forgot password link.", language="en"
    )
    curated = await sync_to_async(_answers)()

    match = await _lookup(curated, "how do I reset my password", "en")
    assert match is not None and match.answer == "Use the Forgot password link."
    assert await _lookup(curated, "How do I not reset my password?", "en") is None  # negation differs
    assert await _lookup(curated, "How do I download my certificate?", "en") is None
    await sync_to_async(curated.sync)()
    assert (await CuratedAnswer.objects.aget()).hits == 1


async def test_the_asker_gets_the_variant_in_their_language() -> None:
    english = await sync_to_async(curated_answer_create)(
        question="How do I reset my password?", answer="Use the Forgot password link.", language="en"
    )
    await sync_to_async(curated_answer_create)(
        question="如何重設密碼？", answer="請點選「忘記密碼」。", language="zh-hant", topic=english.topic
    )
    curated = await sync_to_async(_answers)()
    match = await _lookup(curated, "How do I reset my password", "zh-hant")
    assert match is not None and match.answer == "請點選「忘記密碼」。" and match.language == "zh-hant"


def test_a_write_reloads_the_copy_and_retires_the_cached_answers_it_supersedes() -> None:
    retired: list[tuple[str, str]] = []

    def supersede(vector, normalized, language):
        retired.append((normalized, language))
        return 1

    curated = _answers(supersede=supersede)
    assert len(curated) == 0 and curated.sync() is False
    row = curated_answer_create(question="How do I reset my password?", answer="A", language="en")
    assert curated.sync() is True and len(curated) == 1
    assert retired == [("how do i reset my password", "en")]
    CuratedAnswer.objects.filter(pk=row.pk).update(active=False)
    curated_answer_changed()
    assert curated.sync() is True and len(curated) == 0


async def test_hits_are_written_shortly_after_they_are_counted() -> None:
    await sync_to_async(curated_answer_create)(
        question="How do I reset my password?", answer="Use the Forgot password link.", language="en"
    )
    curated = await sync_to_async(_answers)(hits_flush_delay=0.05)

    assert await _lookup(curated, "how do I reset my password", "en") is not None
    assert await _lookup(curated, "How do I reset my password?", "en") is not None

    async def hits() -> int:
        return (await CuratedAnswer.objects.aget()).hits

    await until_async(hits, lambda count: count == 2, within=2)  # nothing else wrote them: no sync ran
