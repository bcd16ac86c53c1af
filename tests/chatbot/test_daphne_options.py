"""Through a real daphne: a WebSocket message past daphne's size limit closes with 1009, a text frame that is not
UTF-8 with 1007, each with a close frame (not a dropped connection); a big question is never answered."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Iterator

import pytest

from tests.daphne_workers import Worker
from tests.stream_clients import TEXT, WebSocketClient

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    with tempfile.TemporaryDirectory(prefix="ws-limits-") as data_dir:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "chatbot.settings",
            "DATA_DIR": data_dir,
            "DATABASE_URL": "",
            "REDIS_URL": "",
            "RAG_PRELOAD": "false",
            "RAG_JOB_RUNNER": "false",
            "RAG_REPLICA_SYNC": "false",
            "RAG_WORKFLOW_SYNC": "false",
            "CONCURRENCY_LIVE_SETTINGS": "false",
        }
        worker = Worker(env)
        try:
            worker.wait_ready()
            yield worker
        finally:
            worker.stop()


async def first_answer(worker: Worker, payload: bytes) -> tuple[object, int | None]:
    """What the server sends first for one text frame: an event, or None with the close code."""
    socket = await WebSocketClient.connect(worker.url.replace("http://", "ws://") + "/ws/chat/")
    try:
        await socket._send(TEXT, payload)
        async with asyncio.timeout(20):
            event = await socket.receive_json()
        return event, socket.close_code
    finally:
        await socket.close()


@pytest.mark.parametrize(
    ("size", "code"),
    [pytest.param(2 * MIB, 1009, id="2-MiB"), pytest.param(MIB, 1009, id="1-MiB-question")],
)
def test_a_message_past_the_size_limit_closes_with_1009(worker: Worker, size: int, code: int) -> None:
    payload = json.dumps({"type": "ask", "question": "x" * size}).encode()
    assert asyncio.run(first_answer(worker, payload)) == (None, code)


def test_a_text_frame_that_is_not_utf8_closes_with_1007(worker: Worker) -> None:
    assert asyncio.run(first_answer(worker, b'{"type": "ask", "question": "\xff\xfe"}')) == (None, 1007)


def test_a_question_under_the_size_limit_but_over_2000_characters_is_refused(worker: Worker) -> None:
    payload = json.dumps({"type": "ask", "question": "x" * (MIB // 2)}).encode()
    event, code = asyncio.run(first_answer(worker, payload))
    assert code is None and isinstance(event, dict)
    assert event["code"] == "bad_request" and "the limit is 2000" in event["message"]
