"""The question length check every entry point makes: one limit (RAG_MAX_QUESTION_CHARS), one message."""

from __future__ import annotations

from rag.questions import question_too_long


def test_a_question_of_the_limit_passes_and_one_character_more_is_refused_with_both_lengths(settings) -> None:
    settings.RAG_MAX_QUESTION_CHARS = 2000
    assert question_too_long("x" * 2000) == ""
    assert question_too_long("x" * 2001) == "'question' is 2001 characters long; the limit is 2000"


def test_the_message_names_the_question_as_the_request_does(settings) -> None:
    settings.RAG_MAX_QUESTION_CHARS = 5
    message = question_too_long("問題太長了喔", subject="the last user message")
    assert message == "the last user message is 6 characters long; the limit is 5"
