import logging

from rag.deps import SearchReport
from rag.nodes.tool_executor import RRF_K, ToolExecutor, fuse
from tests.rag.chunk_fixtures import FORM_ACCOUNT, FORM_HOURS, chunk
from tests.rag.nodes.support import InMemoryRetriever, StaticRetriever, drain, make_state, make_writer


def executor(retriever, *, top_k=5, timeout=1.0) -> ToolExecutor:
    return ToolExecutor(retriever=retriever, top_k=top_k, timeout=timeout)


async def test_searches_every_query_in_the_question_language_and_reports_it():
    retriever = InMemoryRetriever()
    state = make_state(queries=["如何重設密碼?", "重設密碼"], language="zh-hans", intent="simple_faq")
    writer, channel = make_writer()
    await executor(retriever).run(state, writer)
    assert [c["query"] for c in retriever.calls] == ["如何重設密碼?", "重設密碼"]
    assert {c["language"] for c in retriever.calls} == {"zh-hant"}  # Simplified was normalised to Traditional
    assert {c["kind"] for c in retriever.calls} == {None}
    assert state.retrieved[0].chunk_id == "zh-password-reset#0"
    assert state.tools_used == ["retrieval"]
    [event] = await drain(channel)
    assert (event["stage"], event["queries"], event["hits"]) == (
        "tool",
        ["如何重設密碼?", "重設密碼"],
        len(state.retrieved),
    )


async def test_at_most_three_queries_run():
    retriever = InMemoryRetriever()
    await executor(retriever).run(make_state(queries=["a", "b", "c", "d"]), make_writer()[0])
    assert len(retriever.calls) == 3


async def test_form_intents_search_forms_only_in_every_language():
    retriever = InMemoryRetriever()
    state = make_state(queries=["時數補登申請表"], language="zh-hant", intent="form_download")
    await executor(retriever).run(state, make_writer()[0])
    assert retriever.calls[0]["kind"] == "form"
    assert retriever.calls[0]["language"] is None
    assert {c.kind for c in state.retrieved} == {"form"}


async def test_retries_drop_the_language_filter():
    retriever = InMemoryRetriever()
    await executor(retriever).run(make_state(queries=["password"], language="en", loops=1), make_writer()[0])
    assert retriever.calls[0]["language"] is None


async def test_one_slow_query_is_skipped_and_logged(caplog):
    retriever = InMemoryRetriever(slow_queries=frozenset({"slow"}))
    state = make_state(queries=["slow", "重設密碼"], language="zh-hant")
    writer, channel = make_writer()
    with caplog.at_level(logging.WARNING):
        await executor(retriever, timeout=0.05).run(state, writer)
    assert state.retrieved
    assert "timed out" in caplog.text
    [event] = await drain(channel)
    assert event["failed"] == 1


async def test_all_queries_timing_out_gives_no_chunks_not_an_error():
    retriever = InMemoryRetriever(delay=5)
    state = make_state(queries=["重設密碼", "密碼"], language="zh-hant")
    await executor(retriever, timeout=0.05).run(state, make_writer()[0])
    assert state.retrieved == []
    assert state.error is None


async def test_a_failing_store_is_skipped():
    retriever = InMemoryRetriever(failing_queries=frozenset({"重設密碼"}))
    state = make_state(queries=["重設密碼"], language="zh-hant")
    await executor(retriever).run(state, make_writer()[0])
    assert state.retrieved == []
    assert state.error is None


def test_rrf_rewards_agreement_between_queries():
    a, b, c = chunk("a"), chunk("b"), chunk("c")
    fused = fuse([[a, b, c], [c, b]], top_k=5)
    # b: 1/62 + 1/62, c: 1/63 + 1/61, a: 1/61 -> c and b above a
    assert [x.chunk_id for x in fused] == ["c", "b", "a"]
    assert 1 / (RRF_K + 1) < 2 / (RRF_K + 2)


def test_fusion_dedupes_by_id_keeping_the_best_score_and_keeps_top_k():
    low, high = chunk("a", score=0.2), chunk("a", score=0.9)
    fused = fuse([[low, chunk("b"), chunk("c")], [high]], top_k=2)
    assert [x.chunk_id for x in fused] == ["a", "b"]
    assert fused[0].score == 0.9


def test_fusion_drops_near_duplicate_text():
    text = "Open the reset link in the email. The link is valid for thirty minutes and can be used only once."
    fused = fuse([[chunk("a", text), chunk("copy", text + " "), chunk("b", "Something else entirely here.")]], top_k=5)
    assert [x.chunk_id for x in fused] == ["a", "b"]


async def test_fusion_in_the_node_uses_static_lists():
    retriever = StaticRetriever({"q1": [FORM_HOURS, FORM_ACCOUNT], "q2": [FORM_ACCOUNT]})
    state = make_state(queries=["q1", "q2"])
    await executor(retriever).run(state, make_writer()[0])
    assert [c.form_id for c in state.retrieved] == ["F-103", "F-101"]


def test_chunks_picked_to_lead_go_first_even_from_below_the_cut():
    a, b, c = chunk("a"), chunk("b"), chunk("c")
    fused = fuse([[a, b, c]], top_k=2, lead=lambda kept: kept.chunk_id == "c")
    assert [kept.chunk_id for kept in fused] == ["c", "a"]


class FallbackRetriever(InMemoryRetriever):
    """A store retriever whose embedder failed: it searched with BM25 alone and says so."""

    async def search_report(self, query, *, limit, language=None, kind=None):
        return SearchReport(await self.search(query, limit=limit, language=language, kind=kind), "embedder_error")


async def test_a_search_without_its_dense_side_is_flagged():
    state = make_state(queries=["重設密碼"], language="zh-hant")
    writer, channel = make_writer()
    await executor(FallbackRetriever()).run(state, writer)
    assert state.retrieved and state.retrieval_fallback == "embedder_error"
    [event] = await drain(channel)
    assert event["fallback"] == "embedder_error"


async def test_a_full_search_is_not_flagged():
    state = make_state(queries=["重設密碼"], language="zh-hant")
    writer, channel = make_writer()
    await executor(InMemoryRetriever()).run(state, writer)
    assert state.retrieval_fallback == ""
    [event] = await drain(channel)
    assert event["fallback"] == ""
