from rag.nodes.cache_response import CacheResponse
from tests.rag.nodes.support import answer_text, drain, make_state, make_writer


async def test_streams_the_cached_answer_in_small_deltas_and_restores_sources():
    entry = {
        "answer": "請在登入頁點選「忘記密碼」[1]。",
        "sources": [
            {"ref": 1, "doc_id": "zh-password-reset", "title": "如何重設密碼", "url": "https://help.example/zh/pr"},
            {
                "ref": 2,
                "doc_id": "f",
                "title": "表",
                "url": "u",
                "kind": "form",
                "form_id": "F-1",
                "download_url": "/f",
            },
        ],
    }
    state = make_state(cache_hit=entry)
    writer, channel = make_writer()
    await CacheResponse(stream_chunk_chars=4).run(state, writer)
    events = await drain(channel)
    deltas = [e["delta"] for e in events if e["channel"] == "answer"]
    assert all(len(d) <= 4 for d in deltas)
    assert answer_text(events) == entry["answer"] == state.answer
    assert [s.as_dict() for s in state.sources] == [
        entry["sources"][0],
        {"ref": 2, "doc_id": "f", "title": "表", "url": "u", "kind": "form", "form_id": "F-1", "download_url": "/f"},
    ]


async def test_missing_optional_keys_get_defaults():
    state = make_state(cache_hit={"answer": "a", "sources": [{"title": "t"}]})
    await CacheResponse(stream_chunk_chars=6).run(state, make_writer()[0])
    assert (state.sources[0].ref, state.sources[0].title, state.sources[0].kind) == (1, "t", "article")
