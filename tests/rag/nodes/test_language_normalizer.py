from rag.nodes.language_normalizer import LanguageNormalizer
from tests.rag.nodes.support import history, make_state, make_writer


def node() -> LanguageNormalizer:
    return LanguageNormalizer(default_language="zh-hant")


async def test_simplified_question_becomes_traditional_taiwan_usage():
    state = make_state("软件下载不了怎么办？")
    await node().run(state, make_writer()[0])
    assert state.language == "zh-hans"
    assert state.normalized_question == "軟體下載不了怎麼辦?"


async def test_traditional_and_english_are_kept_with_whitespace_normalised():
    state = make_state("  如何重設密碼？ ")
    await node().run(state, make_writer()[0])
    assert (state.language, state.normalized_question) == ("zh-hant", "如何重設密碼?")
    state = make_state("How do I   reset my password?")
    await node().run(state, make_writer()[0])
    assert (state.language, state.normalized_question) == ("en", "How do I reset my password?")


async def test_other_languages_are_detected_and_left_alone():
    state = make_state("パスワードを忘れました")
    await node().run(state, make_writer()[0])
    assert state.language == "other"
    assert state.normalized_question == "パスワードを忘れました"


async def test_previous_answer_is_the_last_assistant_turn_normalised():
    state = make_state(
        "简短一点",
        history=history(("user", "q1"), ("assistant", "old"), ("user", "q2"), ("assistant", "请先登录软件。")),
    )
    await node().run(state, make_writer()[0])
    assert state.previous_answer == "請先登入軟體。"


async def test_no_history_no_previous_answer():
    state = make_state("如何重設密碼？")
    await node().run(state, make_writer()[0])
    assert state.previous_answer == ""
