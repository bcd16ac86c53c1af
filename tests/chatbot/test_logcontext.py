"""Every log line of a request carries its request and conversation ids, the pipeline's own lines too."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from chatbot.logcontext import RequestContextFilter
from chatbot.streaming import pending_records
from rag import runtime
from tests.chatbot.helpers import JSON_CONTENT, ask_body, sse_request

STREAM = "/api/v1/rag/ask/stream_chat"
pytestmark = pytest.mark.django_db(transaction=True)


class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.addFilter(RequestContextFilter())
        self.lines: list[tuple[str, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.getMessage(), record.request_id, record.conversation_id))  # type: ignore[attr-defined]


async def test_log_lines_inside_the_pipeline_carry_the_request_and_conversation_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pipeline_logger = logging.getLogger("rag.runtime")
    original = runtime.PipelineRun._main

    async def main_that_logs(self: Any) -> None:
        pipeline_logger.warning("pipeline of %s running", self.state.request_id)
        await original(self)

    monkeypatch.setattr(runtime.PipelineRun, "_main", main_that_logs)
    captured = Captured()
    pipeline_logger.addHandler(captured)
    try:
        response = await sse_request(STREAM, ask_body("How do I reset my password?"), headers=[JSON_CONTENT])
        await pending_records()
    finally:
        pipeline_logger.removeHandler(captured)
    summary = response.events()[-1]
    request_id, conversation_id = summary["request_id"], summary["conversation_id"]
    assert captured.lines == [(f"pipeline of {request_id} running", request_id, conversation_id)]
