"""Test doubles and helpers for node tests: a tiny in-memory retriever over the shared help-centre chunks
(tests/rag/chunk_fixtures.py), states and events."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

from rag.events import Event, EventChannel, StreamWriter
from rag.state import PipelineState, RetrievedChunk, Turn
from rag.text.tokenize import tokenize
from tests.rag.chunk_fixtures import CORPUS


@dataclass
class InMemoryRetriever:
    """Scores chunks by the share of query tokens they contain; records every call it gets."""

    chunks: tuple[RetrievedChunk, ...] = CORPUS
    delay: float = 0.0
    slow_queries: frozenset[str] = frozenset()
    failing_queries: frozenset[str] = frozenset()
    calls: list[dict[str, object]] = field(default_factory=list)

    async def search(
        self, query: str, *, limit: int, language: str | None = None, kind: str | None = None
    ) -> list[RetrievedChunk]:
        self.calls.append({"query": query, "limit": limit, "language": language, "kind": kind})
        if self.delay or query in self.slow_queries:
            await asyncio.sleep(self.delay or 60)
        if query in self.failing_queries:
            raise ConnectionError("store unavailable")
        wanted = set(tokenize(query))
        scored = []
        for chunk in self.chunks:
            if (language and chunk.language != language) or (kind and chunk.kind != kind):
                continue
            have = set(tokenize(f"{chunk.title} {chunk.text}"))
            score = len(wanted & have) / len(wanted) if wanted else 0.0
            if score > 0:
                scored.append((score, chunk))
        scored.sort(key=lambda pair: -pair[0])
        return [_with_score(chunk, score) for score, chunk in scored[:limit]]


def _with_score(chunk: RetrievedChunk, score: float) -> RetrievedChunk:
    return replace(chunk, score=round(score, 4))


class StaticRetriever:
    """Returns fixed lists per query (for fusion tests)."""

    def __init__(self, results: dict[str, list[RetrievedChunk]]) -> None:
        self.results = results

    async def search(
        self, query: str, *, limit: int, language: str | None = None, kind: str | None = None
    ) -> list[RetrievedChunk]:
        return self.results.get(query, [])[:limit]


def make_state(question: str = "如何重設密碼？", **fields: object) -> PipelineState:
    state = PipelineState(request_id="req-1", question=question)
    for name, value in fields.items():
        setattr(state, name, value)
    return state


def history(*pairs: tuple[str, str]) -> list[Turn]:
    return [Turn(role=role, content=content) for role, content in pairs]


def make_writer() -> tuple[StreamWriter, EventChannel]:
    channel = EventChannel(max_pending=100_000)
    return StreamWriter("req-1", channel), channel


async def drain(channel: EventChannel) -> list[Event]:
    """Every event emitted so far."""
    events: list[Event] = []
    while True:
        try:
            events.append(await channel.get(0.001))
        except TimeoutError:
            return events


def answer_text(events: list[Event]) -> str:
    return "".join(e["delta"] for e in events if e["channel"] == "answer")
