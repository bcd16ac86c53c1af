"""A small university help site (English and zh-hant pages), indexed in the test into a store of its own, and the
offline default workflow answering from it: the cases of the answers' precision tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rag.deps import PipelineConfig, PipelineDeps
from rag.nodes import build_registry
from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.indexer import build_index
from rag.retrieval.markdown import document_from_text
from rag.retrieval.retriever import StoreRetriever
from rag.retrieval.store import VectorStore
from rag.runtime import AskRequest, PipelineRuntime
from rag.state import PipelineState
from rag.workflows.default import default_workflow


def page(slug: str, language: str, title: str, body: str) -> tuple[str, str]:
    front = f"---\ntitle: {title}\nurl: https://uni.example/{slug}\nlanguage: {language}\n---\n\n# {title}\n\n"
    return slug, front + body.strip() + "\n"


PAGES = dict(
    [
        page(
            "en-it-desk",
            "en",
            "IT service desk",
            """
The IT service desk helps with accounts, Wi-Fi and e-mail. For help, phone the IT service desk at 02-2345-6789
ext. 88100. The desk is open from 9 a.m. Monday to Friday. Dr. Lin, the head of IT, answers e-mail within two
working days.
""",
        ),
        page(
            "en-assignments",
            "en",
            "Assignment uploads",
            """
Each course page has an Assignments tab. The maximum file size for an assignment upload is 100 MB. Accepted
formats are PDF, DOCX and ZIP. Late submissions are marked as late in the gradebook. Lecturers see submissions in
the order they arrive.

## Can I resubmit an assignment?

Yes, until the deadline, unless your lecturer has turned off resubmission.
""",
        ),
        page(
            "en-library",
            "en",
            "Library laptop loans",
            """
Students can borrow a laptop at the library counter with their student card. A laptop loan lasts up to 7 days
and can be renewed once.
""",
        ),
        page(
            "zh-account",
            "zh-hant",
            "帳號與密碼",
            """
學生的帳號 ID 為學號，教職員的帳號 ID 為員工編號。密碼連續輸錯 5 次，帳號會被鎖定 15 分鐘。鎖定期間可以使用「忘記密碼」
重設密碼。新密碼至少 12 個字元。
""",
        ),
        page(
            "zh-submit",
            "zh-hant",
            "如何繳交作業",
            """
繳交作業前請先確認檔案格式。

1. 登入數位學習平台。
2. 進入課程頁面，點選「作業」分頁。
3. 點選要繳交的作業名稱。
4. 點選「上傳檔案」，選擇要繳交的檔案。
5. 點選「儲存變更」：檔案只會存成草稿，老師還看不到。
6. 確認檔案無誤後，點選「送出作業」：送出後老師才看得到。
7. 畫面顯示「已送出」即完成繳交。
""",
        ),
        page(
            "zh-audit-fees",
            "zh-hant",
            "旁聽收費標準",
            """
旁聽生依身分收費，每門課按學期計費。

| 身分 | 每門課費用 | 備註 |
| --- | --- | --- |
| 本校學生 | 免費 | 需經授課教師同意 |
| 本校校友 | 1,000 元 | 需出示校友證 |
| 校外人士 | 2,500 元 | 需於開課前兩週申請 |
| 高中生 | 500 元 | 需家長同意書 |
""",
        ),
        page(
            "zh-recordings",
            "zh-hant",
            "課程錄影保存期限",
            """
課程錄影在上課後兩天內上架。課程錄影保存一年，期滿後自動刪除，需要的同學請在期限內下載。
""",
        ),
        page(
            "zh-online-exam",
            "zh-hant",
            "線上考試規則",
            """
線上考試期間必須全程開啟視訊鏡頭。線上考試不得使用第二台螢幕，也不得使用手機。
""",
        ),
    ]
)


def site_runtime(tmp_path: Path, *, pages: dict[str, str] = PAGES) -> Iterator[PipelineRuntime]:
    """The offline default workflow over `pages` (slug: Markdown), indexed into a store in `tmp_path`."""
    store = VectorStore.open("site", path=tmp_path / "qdrant")
    documents = [document_from_text(text, doc_id=slug) for slug, text in pages.items()]
    build_index(documents, store, LexicalEmbedder(dim=256))
    deps = PipelineDeps(retriever=StoreRetriever(store, LexicalEmbedder(dim=256)), config=PipelineConfig())
    yield PipelineRuntime(registry=build_registry(), deps_factory=lambda: deps, default_workflow=default_workflow())
    store.close()


async def ask(runtime: PipelineRuntime, question: str) -> PipelineState:
    run = await runtime.start(AskRequest(question=question))
    events = [event async for event in run.events()]
    assert [event["channel"] for event in events].count("meta_summary") == 1
    return run.state
