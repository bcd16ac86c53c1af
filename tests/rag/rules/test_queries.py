from rag.rules.queries import STRATEGY_KEY_TERMS, STRATEGY_QUESTION, STRATEGY_TITLE, build_queries


def test_first_pass_searches_the_question_and_its_core_for_chinese():
    plan = build_queries("如何重設密碼？", language="zh-hant", loops=0)
    assert plan.strategy == STRATEGY_QUESTION
    assert plan.queries == ["如何重設密碼？", "重設密碼"]


def test_first_pass_for_english_is_the_question():
    assert build_queries("How do I reset my password?", language="en", loops=0).queries == [
        "How do I reset my password?"
    ]


def test_each_retry_changes_strategy_and_avoids_repeating_a_failed_query():
    first = build_queries("How do I reset my password?", language="en", loops=0)
    second = build_queries("How do I reset my password?", language="en", loops=1, tried=first.queries)
    third = build_queries("How do I reset my password?", language="en", loops=2, tried=second.queries)
    assert (second.strategy, second.queries) == (STRATEGY_KEY_TERMS, ["reset password"])
    assert third.strategy == STRATEGY_TITLE
    assert third.queries[0] == "how to reset password"
    assert not set(second.queries) & set(first.queries)


def test_follow_up_is_completed_with_the_previous_question():
    plan = build_queries(
        "How long does it take?", language="en", loops=0, previous_question="How do I reset my password?"
    )
    assert plan.queries[0] == "How long does it take?"
    assert "reset password" in plan.queries[1]


def test_elaborate_searches_the_previous_question():
    plan = build_queries(
        "詳細一點", language="zh-hant", loops=0, previous_question="如何重設密碼？", instruction="elaborate"
    )
    assert plan.queries[0] == "如何重設密碼？"


def test_never_more_than_three_queries_and_never_none():
    plan = build_queries("那這個呢？", language="zh-hant", loops=0, previous_question="如何報名課程並取得證書")
    assert 1 <= len(plan.queries) <= 3
    assert build_queries("？", language="zh-hant", loops=2).queries
