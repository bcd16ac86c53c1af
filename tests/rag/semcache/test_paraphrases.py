"""The default threshold and the guard on the hand-written paraphrase sets, through the real semantic_cache."""

import pytest

from rag.semcache.models import CacheEntry
from tests.rag.semcache.conftest import remember
from tests.rag.semcache.paraphrases import CASES, HELD_OUT, UNRELATED, acceptable

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(("cases", "min_recall"), [(CASES, 0.9), (HELD_OUT, 0.85)], ids=["tuning-set", "held-out"])
async def test_default_threshold_serves_paraphrases_and_never_a_near_miss(semantic_cache, cases, min_recall):
    for case in cases:
        await remember(semantic_cache, case.stored, language=case.language, answer=f"answer to {case.stored}")
    assert await CacheEntry.objects.acount() == len(cases)

    served, wrong = 0, []
    for case in cases:
        for question in (*case.same, *case.different):
            entry = await semantic_cache.lookup(question, language=case.language)
            if entry is None:
                continue
            served_for = entry["answer"].removeprefix("answer to ")
            if not acceptable(question, served_for, case):
                wrong.append((question, served_for))
            elif question in case.same:
                served += 1
    for language, question in UNRELATED:
        entry = await semantic_cache.lookup(question, language=language)
        if entry is not None:
            wrong.append((question, entry["answer"]))

    assert wrong == [], "\n".join(map(str, wrong))
    assert served / sum(len(case.same) for case in cases) >= min_recall
