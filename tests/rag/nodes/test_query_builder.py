from rag.nodes.query_builder import QueryBuilder
from tests.rag.nodes.support import drain, history, make_state, make_writer


async def test_first_pass_builds_queries_without_counting_a_loop():
    state = make_state(normalized_question="如何重設密碼?", language="zh-hant")
    writer, channel = make_writer()
    await QueryBuilder().run(state, writer)
    assert state.queries == ["如何重設密碼?", "重設密碼"]
    assert state.search_query == "如何重設密碼?"
    assert state.loops == 0
    assert await drain(channel) == []


async def test_each_later_pass_counts_a_loop_and_varies_the_queries():
    state = make_state(normalized_question="How do I reset my password?", language="en")
    writer, channel = make_writer()
    node = QueryBuilder()
    await node.run(state, writer)
    first = list(state.queries)
    await node.run(state, writer)
    assert state.loops == 1
    assert state.queries != first
    await node.run(state, writer)
    assert state.loops == 2
    events = await drain(channel)
    assert [(e["stage"], e["strategy"]) for e in events] == [("retry", "key_terms"), ("retry", "title_phrase")]


async def test_follow_up_uses_the_previous_question_normalised():
    state = make_state(
        normalized_question="那要多久?",
        language="zh-hant",
        history=history(("user", "如何重设密码？"), ("assistant", "……")),
    )
    await QueryBuilder().run(state, make_writer()[0])
    assert any("重設密碼" in q for q in state.queries)
    assert 1 <= len(state.queries) <= 3
