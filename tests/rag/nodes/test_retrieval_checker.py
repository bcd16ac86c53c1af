import pytest

from rag.nodes.retrieval_checker import RetrievalChecker
from tests.rag.chunk_fixtures import ENROL_EN, FORM_HOURS, PASSWORD_EN, PASSWORD_ZH, chunk
from tests.rag.nodes.support import history, make_state, make_writer


def checker(*, min_score=0.0, min_overlap=0.4, max_loops=2) -> RetrievalChecker:
    return RetrievalChecker(min_score=min_score, min_overlap=min_overlap, max_loops=max_loops, top_n=3)


async def test_relevant_when_a_top_chunk_contains_the_key_terms():
    state = make_state(normalized_question="如何重設密碼?", retrieved=[PASSWORD_ZH])
    assert await checker().run(state, make_writer()[0]) == "relevant"
    assert state.retrieval_verdict == "relevant"


async def test_unrelated_chunks_retry_then_fall_back():
    node = checker()
    verdicts = []
    for loops in range(3):
        state = make_state(normalized_question="How do I reset my password?", retrieved=[ENROL_EN], loops=loops)
        verdicts.append(await node.run(state, make_writer()[0]))
    assert verdicts == ["retry", "retry", "fallback"]


async def test_nothing_retrieved_is_not_relevant():
    state = make_state(normalized_question="x", retrieved=[], loops=2)
    assert await checker().run(state, make_writer()[0]) == "fallback"


async def test_score_floor():
    low = chunk("en-password-reset#0", PASSWORD_EN.text, score=0.1, title=PASSWORD_EN.title)
    state = make_state(normalized_question="How do I reset my password?", retrieved=[low])
    assert await checker(min_score=0.5).run(state, make_writer()[0]) == "retry"
    assert await checker(min_score=0.05).run(state, make_writer()[0]) == "relevant"


async def test_a_lower_ranked_precise_chunk_counts():
    state = make_state(normalized_question="How do I reset my password?", retrieved=[ENROL_EN, PASSWORD_EN])
    assert await checker().run(state, make_writer()[0]) == "relevant"


async def test_the_search_query_judges_a_tell_me_more():
    state = make_state(
        normalized_question="詳細一點",
        search_query="如何重設密碼?",
        history=history(("user", "如何重設密碼?"), ("assistant", "到登入頁點選忘記密碼。[1]")),
        retrieved=[PASSWORD_ZH],
    )
    assert await checker().run(state, make_writer()[0]) == "relevant"


async def test_without_a_conversation_a_retry_query_in_the_help_centres_words_does_not_vouch_for_the_question():
    # a retry's variation (the model's, with an LLM) reworded an off-topic question into the help centre's terms
    state = make_state(
        normalized_question="Which stocks should I buy this year?",
        search_query="How do I reset my password?",
        retrieved=[PASSWORD_EN],
        loops=2,
    )
    assert await checker().run(state, make_writer()[0]) == "fallback"


@pytest.mark.parametrize(("intent", "verdict"), [("form_download", "relevant"), ("form_export", "relevant")])
async def test_any_form_is_enough_for_form_intents(intent, verdict):
    state = make_state(normalized_question="我要下載表單", intent=intent, retrieved=[FORM_HOURS])
    assert await checker().run(state, make_writer()[0]) == verdict


async def test_max_loops_zero_never_retries():
    state = make_state(normalized_question="How do I reset my password?", retrieved=[ENROL_EN])
    assert await checker(max_loops=0).run(state, make_writer()[0]) == "fallback"


SANSKRIT = chunk(
    "drcd#1",
    "蘭札式字體，若把字頭去除，便會是瓦德體，為常見的書寫方式，如下。",
    title="梵文",
)


async def test_a_chinese_question_in_other_words_counts_when_most_of_its_characters_are_there():
    # "如果去掉頭會是" against "若把字頭去除，便會是": 3 of 11 bigrams shared, 10 of 12 characters
    state = make_state(normalized_question="蘭札體如果去掉頭會是什麼書寫體？", retrieved=[SANSKRIT], loops=2)
    assert await checker().run(state, make_writer()[0]) == "fallback"  # bigrams alone: not enough
    paraphrase_aware = RetrievalChecker(min_score=0.0, min_overlap=0.4, max_loops=2, top_n=3, min_char_overlap=0.7)
    assert await paraphrase_aware.run(state, make_writer()[0]) == "relevant"
    unrelated = make_state(normalized_question="如何重設密碼？", retrieved=[SANSKRIT], loops=2)
    assert await paraphrase_aware.run(unrelated, make_writer()[0]) == "fallback"
