"""response_synth reads the article of a procedure written as step sections from the retriever, so a how-to
question gets every step although retrieval found only some; without the article it answers from what it has."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.simulator.testing import SimulatorProcess
from rag.nodes.response_synth import ResponseSynth
from rag.prompting.prompts import CataloguePrompts
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.indexer import build_index
from rag.retrieval.markdown import load_markdown_file
from rag.retrieval.retriever import StoreRetriever
from rag.retrieval.store import VectorStore
from rag.state import RetrievedChunk
from tests.rag.llm.conftest import BackendFactory
from tests.rag.nodes.support import answer_text, drain, make_state, make_writer

DEMO = Path(__file__).resolve().parents[3] / "rag" / "corpus" / "demo"
ARTICLES = ("zh-hours-missing.md", "zh-hours-reporting.md", "zh-learning-hours.md", "zh-form-hours-correction.md")
QUESTION = "上完課但查不到研習時數，要怎麼檢查？"
STEPS = ["第一步：確認課程是否真的「已完成」", "第二步：查看上傳狀態", "第三步：確認是否使用了另一個帳號"]


@pytest.fixture
def retriever(tmp_path: Path) -> Iterator[StoreRetriever]:
    store = VectorStore.open("steps", path=tmp_path / "qdrant")
    build_index([load_markdown_file(DEMO / name, root=DEMO) for name in ARTICLES], store, LexicalEmbedder(dim=256))
    yield StoreRetriever(store, LexicalEmbedder(dim=256))
    store.close()


class FailingReader:
    async def document_chunks(self, doc_id: str, *, limit: int) -> list[RetrievedChunk]:
        raise ConnectionError("the store went away")


class HangingReader:
    def __init__(self) -> None:
        self.never = asyncio.Event()

    async def document_chunks(self, doc_id: str, *, limit: int) -> list[RetrievedChunk]:
        await self.never.wait()
        return []


def synth(reader: object, *, timeout: float = 5.0, **llm: object) -> ResponseSynth:
    return ResponseSynth(
        stream_chunk_chars=50,
        forms_base_url="/forms/",
        forms_export_url="/api/forms.csv",
        max_sentences=5,
        min_sentences=2,
        contact_zh="客服 02-0000",
        contact_en="call 02-0000",
        documents=reader,  # type: ignore[arg-type]  # the doubles fit DocumentReader structurally
        document_timeout=timeout,
        **llm,  # type: ignore[arg-type]
    )


async def answer(node: ResponseSynth, retrieved: list[RetrievedChunk]) -> str:
    state = make_state(
        QUESTION,
        normalized_question=QUESTION,
        language="zh-hant",
        intent="simple_faq",
        should_retrieve=True,
        retrieved=retrieved,
        retrieval_verdict="relevant",
    )
    writer, channel = make_writer()
    await node.run(state, writer)
    assert answer_text(await drain(channel)) == state.answer
    return state.answer


def step_labels(text: str) -> list[str]:
    return re.findall(r"^\*\*(.+)\*\*$", text, flags=re.MULTILINE)


async def test_every_step_is_read_from_the_article(retriever: StoreRetriever) -> None:
    retrieved = await retriever.search(QUESTION, limit=5, language="zh-hant")
    found = [c.heading.rsplit(" > ", 1)[-1] for c in retrieved if c.doc_id == "zh-hours-missing"]
    assert found[0] == STEPS[0] and STEPS[1] not in found  # retrieval found the first step, not the second
    text = await answer(synth(retriever), retrieved)
    assert step_labels(text) == STEPS
    assert "時數會在完成後 3 個工作天內上傳" in text  # the second step, read from the article


@pytest.mark.parametrize("reader", [FailingReader(), HangingReader()], ids=["failing", "hanging"])
async def test_without_the_article_the_answer_uses_what_was_retrieved(
    retriever: StoreRetriever, reader: object
) -> None:
    retrieved = await retriever.search(QUESTION, limit=5, language="zh-hant")
    text = await answer(synth(reader, timeout=0.01), retrieved)
    # one step retrieved is no procedure: the sentences retrieved, and no error
    assert step_labels(text) == []
    assert "/help/zh/hours-missing" in text


async def test_the_model_is_given_every_step_in_order(
    retriever: StoreRetriever, make_backend: BackendFactory, sim: SimulatorProcess, prompts: CataloguePrompts
) -> None:
    retrieved = await retriever.search(QUESTION, limit=5, language="zh-hant")
    await answer(synth(retriever, llm=make_backend(), prompts=prompts), retrieved)
    system = (await sim.arequests())[0]["body"]["messages"][0]["content"]
    # each step under its heading, in order, in the one numbered source of the article
    positions = [system.index(step) for step in STEPS]
    assert positions == sorted(positions)
    assert system.index(STEPS[1]) < system.index("時數會在完成後 3 個工作天內上傳") < system.index(STEPS[2])
    assert system.count("研習時數沒有出現 —") == 1
