import pytest

from rag.rules.planner_rules import (
    CONVERSATION_FOLLOWUP,
    FORM_DOWNLOAD,
    FORM_EXPORT,
    OUT_OF_SCOPE,
    ROUTE_DIRECT,
    ROUTE_FOLLOWUP,
    ROUTE_RETRIEVE,
    SIMPLE_FAQ,
    plan_offline,
)


@pytest.mark.parametrize(
    ("question", "intent"),
    [
        ("如何重設密碼？", SIMPLE_FAQ),
        ("How do I reset my password?", SIMPLE_FAQ),
        ("請問時數補登申請表在哪裡下載", FORM_DOWNLOAD),
        ("Where can I download the application form?", FORM_DOWNLOAD),
        ("我要匯出表單清單", FORM_EXPORT),
        ("export the list of forms as CSV", FORM_EXPORT),
        ("今天天氣如何", OUT_OF_SCOPE),
        ("Tell me a joke", OUT_OF_SCOPE),
        ("What is the stock price of TSMC?", OUT_OF_SCOPE),
        # Conservative: a question that touches the platform is never turned away.
        ("課程影片裡提到的天氣資料在哪裡看", SIMPLE_FAQ),
        ("The login form does not load", SIMPLE_FAQ),
        ("匯出我的學習時數紀錄", SIMPLE_FAQ),
        ("量子力學是什麼", SIMPLE_FAQ),
    ],
)
def test_intents(question, intent):
    assert plan_offline(question, previous_answer="").intent == intent


def test_retrieval_decision_and_route_follow_the_intent():
    faq = plan_offline("如何重設密碼？", previous_answer="")
    assert (faq.should_retrieve, faq.route) == (True, ROUTE_RETRIEVE)
    off = plan_offline("今天天氣如何", previous_answer="")
    assert (off.should_retrieve, off.route) == (False, ROUTE_DIRECT)


def test_transform_of_the_previous_answer_is_a_followup():
    plan = plan_offline("用英文", previous_answer="重設密碼的步驟如下。")
    assert (plan.intent, plan.followup_instruction, plan.route) == (
        CONVERSATION_FOLLOWUP,
        "translate:en",
        ROUTE_FOLLOWUP,
    )
    assert plan.should_retrieve is False


def test_transform_without_a_previous_answer_is_an_ordinary_question():
    assert plan_offline("用英文", previous_answer="").intent == SIMPLE_FAQ


def test_elaborate_retrieves_again():
    plan = plan_offline("詳細一點", previous_answer="重設密碼的步驟如下。")
    assert (plan.intent, plan.followup_instruction, plan.route) == (CONVERSATION_FOLLOWUP, "elaborate", ROUTE_RETRIEVE)
