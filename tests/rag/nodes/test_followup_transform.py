from rag.nodes.followup_transform import FollowupTransform
from tests.rag.nodes.support import drain, make_state, make_writer

PREVIOUS = "第一句很重要[1]。第二句補充說明[1]。第三句也很長很長很長[1]。\n\n資料來源：\n[1] 如何重設密碼 (https://help.example/zh/pr)"


def node() -> FollowupTransform:
    return FollowupTransform(summary_chars=12, shorten_chars=400)


async def test_writes_the_answer_without_streaming_it():
    state = make_state(previous_answer=PREVIOUS, followup_instruction="summarize", language="zh-hant")
    writer, channel = make_writer()
    await node().run(state, writer)
    assert state.answer.startswith("第一句很重要[1]。\n\n資料來源：")
    assert [(s.ref, s.url) for s in state.sources] == [(1, "https://help.example/zh/pr")]
    assert await drain(channel) == []


async def test_simplified_on_request():
    state = make_state(previous_answer=PREVIOUS, followup_instruction="translate:zh-hans", language="zh-hant")
    await node().run(state, make_writer()[0])
    assert "第二句补充说明[1]" in state.answer


async def test_english_translation_is_declined_in_the_question_language():
    state = make_state(previous_answer=PREVIOUS, followup_instruction="translate:en", language="en")
    await node().run(state, make_writer()[0])
    assert state.answer.startswith("Sorry, translating between Chinese and English")
    assert PREVIOUS in state.answer
