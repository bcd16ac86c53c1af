"""curated_lookup: a curated answer becomes the ready answer cache_response streams, marked as curated."""

import asyncio
from dataclasses import dataclass, field
from typing import Any

from rag.nodes.curated_lookup import CuratedLookup
from tests.rag.nodes.support import history, make_state, make_writer


@dataclass
class Match:
    curated_id: str = "c1"
    score: float = 0.9
    language: str = "en"
    answer: str = "Use the Forgot password link."
    sources: list[dict[str, Any]] = field(
        default_factory=lambda: [{"ref": 1, "doc_id": "", "title": "Passwords", "url": "https://help.example/pw"}]
    )


class Curated:
    def __init__(self, match=None, *, delay=0.0, fail=False):
        self.match, self.delay, self.fail = match, delay, fail
        self.asked: list[tuple[str, str]] = []

    async def lookup(self, question, *, language):
        self.asked.append((question, language))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise ConnectionError("down")
        return self.match


async def test_a_match_is_the_ready_answer_with_its_source_link_and_marked_curated():
    state = make_state(normalized_question="how do i reset my password", language="en")
    route = await CuratedLookup(curated=Curated(Match()), timeout=1).run(state, make_writer()[0])

    assert route == "hit"
    assert state.curated_hit is not None and state.curated_hit.curated_id == "c1"
    assert state.cache_hit is not None
    assert state.cache_hit["answer"].startswith("Use the Forgot password link.")
    assert "https://help.example/pw" in state.cache_hit["answer"]
    assert state.cache_hit["sources"] == [
        {"ref": 1, "doc_id": "", "title": "Passwords", "url": "https://help.example/pw"}
    ]


async def test_no_match_slow_or_failing_answers_is_a_miss():
    for curated in (Curated(None), Curated(Match(), delay=0.5), Curated(Match(), fail=True)):
        state = make_state(normalized_question="how do i reset my password", language="en")
        assert await CuratedLookup(curated=curated, timeout=0.05).run(state, make_writer()[0]) == "miss"
        assert state.curated_hit is None and state.cache_hit is None


async def test_a_follow_up_mid_conversation_is_not_looked_up():
    curated = Curated(Match())
    state = make_state(
        normalized_question="學生呢？",
        language="zh-hant",
        history=history(("user", "如何重設密碼？"), ("assistant", "請點忘記密碼 [1]。")),
    )
    assert await CuratedLookup(curated=curated, timeout=1).run(state, make_writer()[0]) == "miss"
    assert curated.asked == []
