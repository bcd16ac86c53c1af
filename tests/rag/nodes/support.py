"""Test doubles and helpers for node tests: a tiny in-memory retriever, a few help-centre chunks, events."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace

from rag.events import Event, EventChannel, StreamWriter
from rag.state import PipelineState, RetrievedChunk, Turn
from rag.text.tokenize import tokenize

PASSWORD_ZH = RetrievedChunk(
    chunk_id="zh-password-reset#0",
    doc_id="zh-password-reset",
    title="如何重設密碼",
    url="https://help.example/zh/password-reset",
    heading="重設密碼步驟",
    language="zh-hant",
    score=0.0,
    text=(
        "忘記登入密碼時，您可以自行在線上重設密碼，不需要來電。\n"
        "1. 在登入頁面點選「忘記密碼」。\n"
        "2. 輸入帳號與綁定的電子郵件信箱。\n"
        "3. 開啟信件中的重設連結，連結有效時間為 30 分鐘。\n"
        "4. 輸入新密碼兩次後按「確認」。"
    ),
)
LOCKED_ZH = RetrievedChunk(
    chunk_id="zh-account-locked#0",
    doc_id="zh-account-locked",
    title="帳號被鎖住怎麼辦",
    url="https://help.example/zh/account-locked",
    heading="帳號鎖定",
    language="zh-hant",
    score=0.0,
    text="連續輸入錯誤密碼 5 次，帳號會被鎖住 15 分鐘。鎖定時間結束後即可重新登入，或使用忘記密碼功能解鎖。",
)
PASSWORD_EN = RetrievedChunk(
    chunk_id="en-password-reset#0",
    doc_id="en-password-reset",
    title="How do I reset my password",
    url="https://help.example/en/password-reset",
    heading="Resetting your password",
    language="en",
    score=0.0,
    text=(
        "If you have forgotten your password, you can reset it yourself online.\n"
        "1. On the login page, select Forgot password.\n"
        "2. Enter your account ID and the email address linked to the account.\n"
        "3. Open the reset link in the email. The link is valid for 30 minutes.\n"
        "4. Enter your new password twice and select Confirm."
    ),
)
ENROL_EN = RetrievedChunk(
    chunk_id="en-enrolment#0",
    doc_id="en-enrolment",
    title="How to enrol in a course",
    url="https://help.example/en/enrolment",
    heading="Enrolling",
    language="en",
    score=0.0,
    text="Open the course page and select Enrol. Enrolment closes 3 days before the course starts.",
)
FORM_HOURS = RetrievedChunk(
    chunk_id="form-F-101",
    doc_id="form-F-101",
    title="時數補登申請表",
    url="https://help.example/forms/F-101",
    language="zh-hant",
    score=0.0,
    kind="form",
    form_id="F-101",
    form_file="F-101.pdf",
    text="學習時數未正確登錄時，填寫時數補登申請表申請補登。",
)
FORM_ACCOUNT = RetrievedChunk(
    chunk_id="form-F-103",
    doc_id="form-F-103",
    title="帳號資料變更申請表",
    url="https://help.example/forms/F-103",
    language="zh-hant",
    score=0.0,
    kind="form",
    form_id="F-103",
    form_file="F-103.docx",
    text="變更帳號綁定的電子郵件或姓名時，填寫帳號資料變更申請表。",
)
CORPUS = (PASSWORD_ZH, LOCKED_ZH, PASSWORD_EN, ENROL_EN, FORM_HOURS, FORM_ACCOUNT)


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


def chunk(chunk_id: str, text: str = "", *, score: float = 0.5, **fields: object) -> RetrievedChunk:
    base = {"doc_id": chunk_id.split("#")[0], "title": chunk_id, "url": f"https://help.example/{chunk_id}"}
    base.update(fields)
    return RetrievedChunk(chunk_id=chunk_id, text=text or f"text of {chunk_id}", score=score, **base)  # type: ignore[arg-type]
