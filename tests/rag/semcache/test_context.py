"""Which questions the semantic cache may serve and keep: context-free ones only."""

import pytest

from rag.semcache.context import has_conversation, lookup_allowed, stands_alone, store_allowed
from rag.state import Turn

HISTORY = [Turn("user", "如何報名課程？"), Turn("assistant", "登入後在課程頁點選「報名」[1]。")]

# Each takes its subject from the turn before: cached under its bare text it would answer someone else's question.
ELLIPTICAL = [
    "What about teachers?",
    "How much?",
    "And for students?",
    "Can teachers apply too?",
    "What if I am a teacher?",
    "Is it free?",
    "How much does the course cost?",
    "學生呢？",
    "要多少錢？",
    "老師也可以嗎？",
    "學生的話？",
    "費用多少？",
    "怎麼申請？",
    "這門課什麼時候開始？",
]
STANDALONE = [
    "How do I reset my password?",
    "Where do I download the certificate?",
    "Is it possible to change my email address?",
    "如何重設密碼？",
    "忘記密碼怎麼辦",
    "如何報名課程？",
    "證書在哪裡下載",
]


@pytest.mark.parametrize("question", ELLIPTICAL)
def test_elliptical_questions_do_not_stand_alone(question):
    assert not stands_alone(question)


@pytest.mark.parametrize("question", STANDALONE)
def test_questions_that_name_their_subject_stand_alone(question):
    assert stands_alone(question)


@pytest.mark.parametrize("question", ["How much?", "學生呢？"])
def test_without_a_conversation_any_question_but_a_marked_follow_up_is_context_free(question):
    assert lookup_allowed(question, history=[])
    assert not lookup_allowed("那要多久？", history=[])


@pytest.mark.parametrize("question", ["How much?", "學生呢？"])
def test_a_running_summary_is_a_conversation_too(question):
    assert has_conversation(history=[], summary="使用者詢問報名課程。")
    assert not lookup_allowed(question, history=[], summary="使用者詢問報名課程。")


@pytest.mark.parametrize("question", ["What about teachers?", "學生呢？", "How much?", "要多少錢？"])
def test_mid_conversation_an_elliptical_question_is_neither_looked_up_nor_stored(question):
    assert not lookup_allowed(question, history=HISTORY)
    assert not store_allowed(question, history=HISTORY, queries=[question])


def test_mid_conversation_a_standalone_question_is_looked_up_and_kept_when_answered_from_its_own_words():
    assert lookup_allowed("如何重設密碼？", history=HISTORY)
    assert store_allowed("如何重設密碼？", history=HISTORY, intent="simple_faq", queries=["如何重設密碼？", "重設密碼"])


def test_mid_conversation_an_answer_found_by_a_query_rewritten_from_the_history_is_not_kept():
    # "reset the password of my course account": 課程 came from the history, not from the question
    assert not store_allowed("如何重設密碼？", history=HISTORY, queries=["重設課程帳號密碼", "重設密碼"])


def test_an_answer_planned_as_a_conversation_follow_up_is_not_kept():
    assert not store_allowed("如何重設密碼？", history=HISTORY, intent="conversation_followup")
    assert not store_allowed("如何重設密碼？", history=HISTORY, followup_instruction="shorten")


def test_mid_conversation_an_answer_written_by_a_model_that_read_the_history_is_not_kept():
    assert not store_allowed("如何重設密碼？", history=HISTORY, queries=["重設密碼"], answer_saw_history=True)
    # without a conversation the model had nothing else to read
    assert store_allowed("如何重設密碼？", history=[], queries=["重設密碼"], answer_saw_history=True)
