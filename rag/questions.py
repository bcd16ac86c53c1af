"""The one length check of a question, which every entry point (the chat transports, the OpenAI-compatible API, a
workflow's test run) makes before the pipeline runs; the guard node keeps its own `max_chars` as a parameter."""

from __future__ import annotations

from django.conf import settings

__all__ = ["question_too_long"]


def question_too_long(question: str, *, subject: str = "'question'") -> str:
    """Why `question` is refused for its length (longer than `RAG_MAX_QUESTION_CHARS`), or "" when it is not;
    `subject` names it in the message as the request does."""
    limit: int = settings.RAG_MAX_QUESTION_CHARS
    if len(question) <= limit:
        return ""
    return f"{subject} is {len(question)} characters long; the limit is {limit}"
