"""The other language's passages searched alone with a question's glossary translations, on a two-language help
site built here where the password-reset page exists in English only: a Chinese question about it finds it first
and the offline answer quotes it after the other-language notice, while a question the asker's language answers
keeps its own page first and gets no notice."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from rag.deps import PipelineConfig, PipelineDeps
from rag.nodes import build_registry
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.indexer import build_index
from rag.retrieval.markdown import document_from_text
from rag.retrieval.other_language import OtherLanguageSearch
from rag.retrieval.retriever import StoreRetriever
from rag.retrieval.sparse import query_encoder
from rag.retrieval.store import VectorStore
from rag.rules import messages
from rag.runtime import AskRequest, PipelineRuntime
from rag.state import RetrievedChunk
from rag.text.glossary import builtin_glossary
from rag.workflows.default import default_workflow


def page(slug: str, language: str, title: str, body: str) -> tuple[str, str]:
    front = f"---\ntitle: {title}\nurl: https://uni.example/{slug}\nlanguage: {language}\n---\n\n# {title}\n\n"
    return slug, front + body.strip() + "\n"


PAGES = dict(
    [
        page(
            "en-password-reset",
            "en",
            "Resetting your password",
            "Select Forgot password on the sign-in page and enter your email address. The reset link we send "
            "expires after 30 minutes; request a new one if it has.",
        ),
        page("en-library", "en", "Library loans", "Students may borrow up to 10 books for 28 days."),
        # zh-hant pages sharing the question's characters (信, 失效, 密碼) without answering it
        page(
            "zh-change-email",
            "zh-hant",
            "變更電子郵件信箱",
            "電子郵件信箱用於接收通知信。變更信箱後，系統會寄出確認信，請在信中點選連結完成變更。",
        ),
        page(
            "zh-two-factor",
            "zh-hant",
            "兩步驟驗證",
            "驗證碼每 30 秒更新一次，舊的驗證碼隨即失效。手機時間不準時，驗證碼會失效。",
        ),
        page(
            "zh-login",
            "zh-hant",
            "登入說明",
            "請以帳號與密碼登入。密碼連續輸入錯誤五次，帳號會鎖定十五分鐘。",
        ),
        page("zh-library", "zh-hant", "圖書借閱", "學生最多可借閱 10 本書，借期 28 天。"),
    ]
)

ASKED = "重設密碼的信多久會失效？"  # answered only by en-password-reset


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VectorStore]:
    opened = VectorStore.open("other-language", path=tmp_path_factory.mktemp("other-language") / "qdrant")
    documents = [document_from_text(text, doc_id=slug) for slug, text in PAGES.items()]
    build_index(documents, opened, LexicalEmbedder(dim=256))
    yield opened
    opened.close()


def retriever(store: VectorStore, *, other: bool) -> StoreRetriever:
    return StoreRetriever(
        store,
        LexicalEmbedder(dim=256),
        encoder=query_encoder(1.0),
        other_language=OtherLanguageSearch(builtin_glossary()) if other else None,
    )


def articles(chunks: list[RetrievedChunk]) -> list[str]:
    return list(dict.fromkeys(chunk.doc_id for chunk in chunks))


async def test_a_chinese_question_finds_first_the_page_only_english_has(store: VectorStore) -> None:
    found = await retriever(store, other=True).search(ASKED, limit=5, language="zh-hant")
    assert articles(found)[0] == "en-password-reset"
    # the expanded query alone lets the zh-hant pages sharing the question's characters outrank it
    plain = await retriever(store, other=False).search(ASKED, limit=5, language="zh-hant")
    assert articles(plain)[0] != "en-password-reset"
    assert [chunk.score for chunk in found] == sorted((chunk.score for chunk in found), reverse=True)


@pytest.mark.parametrize(
    ("question", "language", "doc_id"),
    [
        ("圖書館可以借幾本書？", "zh-hant", "zh-library"),
        ("How many books can I borrow from the library?", "en", "en-library"),
        ("密碼輸錯幾次會鎖定？", "zh-hant", "zh-login"),
    ],
)
async def test_the_askers_page_that_answers_stays_first(
    store: VectorStore, question: str, language: str, doc_id: str
) -> None:
    found = await retriever(store, other=True).search(question, limit=5, language=language)
    assert articles(found)[0] == doc_id


async def test_it_passes_what_says_less_and_comes_no_lower_than_the_within_th_article(store: VectorStore) -> None:
    zh = [c for c in await retriever(store, other=False).search(ASKED, limit=10) if c.language == "zh-hant"]
    english = {c.doc_id: c for c in await retriever(store, other=False).search(ASKED, limit=10) if c.language == "en"}
    reset = english["en-password-reset"]
    by_doc = {chunk.doc_id: chunk for chunk in reversed(zh)}
    # two zh-hant passages saying the whole question (titled with it), then one saying little of it
    strong = [dataclasses.replace(by_doc[doc_id], title=ASKED) for doc_id in ("zh-login", "zh-two-factor")]
    chunks = [*strong, by_doc["zh-change-email"]]
    search = OtherLanguageSearch(builtin_glossary())
    admitted = search.admit(search.read(ASKED), chunks, reset, "zh-hant")
    assert articles(admitted) == ["zh-login", "zh-two-factor", "en-password-reset"]
    assert admitted[2].score == chunks[2].score  # the score of the passage it passes
    bounded = OtherLanguageSearch(builtin_glossary(), within=2)
    assert articles(bounded.admit(bounded.read(ASKED), chunks, reset, "zh-hant")) == [
        "zh-login",
        "en-password-reset",
        "zh-two-factor",
    ]
    # a passage saying too little of the question is not let in
    library = (await retriever(store, other=False).search("library books", limit=1, language="en"))[0]
    assert library.doc_id == "en-library"
    assert search.admit(search.read(ASKED), chunks, library, "zh-hant") == chunks
    # nor when its article is among the first already
    assert search.admit(search.read(ASKED), [*chunks[:1], reset, *chunks[1:]], reset, "zh-hant")[1] == reset


async def ask(store: VectorStore, question: str) -> tuple[str, list[str]]:
    deps = PipelineDeps(retriever=retriever(store, other=True), config=PipelineConfig())
    runtime = PipelineRuntime(registry=build_registry(), deps_factory=lambda: deps, default_workflow=default_workflow())
    run = await runtime.start(AskRequest(question=question))
    async for _ in run.events():
        pass
    return run.state.answer, [source.doc_id for source in run.state.sources]


async def test_the_offline_answer_quotes_the_english_page_after_the_notice(store: VectorStore) -> None:
    answer, sources = await ask(store, ASKED)
    assert answer.startswith(messages.text("other_language", "zh-hant"))
    assert "30 minutes" in answer
    assert sources[:1] == ["en-password-reset"]


async def test_a_question_its_own_language_answers_gets_no_notice(store: VectorStore) -> None:
    answer, sources = await ask(store, "圖書館可以借幾本書？")
    assert not answer.startswith(messages.text("other_language", "zh-hant"))
    assert "10 本書" in answer
    assert sources[:1] == ["zh-library"]
