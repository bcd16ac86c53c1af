"""The raw streaming path: the simulator's events read as plain dicts (no SDK model per chunk), the SSE decoding
rules, and in-band errors becoming the SDK's errors so the call policy treats them as before."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from openai import APIError

from devtools.simulator.testing import SimulatorProcess
from rag.errors import UpstreamError
from rag.llm.client import ClientKey, get_client
from rag.llm.config import HttpClient
from rag.llm.streams import ChatStreamParser, RawEventStream, ResponsesStreamParser, StreamEventError, sse_json_events
from tests.rag.llm.conftest import USER, BackendFactory, on_each_http_client


async def lines_of(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line


async def decoded(*lines: str) -> list[object]:
    return [event async for event in sse_json_events(lines_of(*lines))]


@on_each_http_client
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_the_simulators_stream_arrives_as_plain_dicts_and_parses_to_reasoning_answer_and_usage(
    api: str, http_client: HttpClient, sim: SimulatorProcess, manager: object
) -> None:
    client = get_client(ClientKey(sim.base_url, "x", 5.0, 30.0, http_client))
    parser: ChatStreamParser | ResponsesStreamParser
    if api == "chat":
        body: dict[str, Any] = {"model": "sim-chat", "messages": USER, "stream_options": {"include_usage": True}}
        path, parser = "/chat/completions", ChatStreamParser()
    else:
        body = {"model": "sim-responses", "input": USER}
        path, parser = "/responses", ResponsesStreamParser()
    stream = await RawEventStream.open(client, path, {**body, "stream": True})
    events = []
    try:
        async for event in stream:
            events.append(event)
    finally:
        await stream.close()
    assert events and all(type(event) is dict for event in events)
    deltas = [delta for event in events for delta in parser.feed(event)]
    assert [d.kind for d in deltas] == ["reasoning"] * 4 + ["answer"] * 12
    assert "".join(d.text for d in deltas if d.kind == "answer").startswith("Summary: How do I reset my password")
    assert parser.finished
    assert parser.usage is not None and parser.usage.output_tokens == 16


@on_each_http_client
async def test_a_dropped_stream_mid_answer_is_one_upstream_error(
    make_backend: BackendFactory, sim: SimulatorProcess
) -> None:
    await sim.afaults(fail_next=["drop:7"])
    kinds: list[str] = []
    with pytest.raises(UpstreamError, match=r"broke off mid-answer|ended before the answer was complete"):
        async with contextlib.aclosing(make_backend().stream_answer(backend="responses", node="n", input="hi")) as it:
            async for delta in it:
                kinds.append(delta.kind)
    assert kinds == ["reasoning"] * 4 + ["answer"] * 3
    assert (await sim.astats())["endpoints"]["responses"]["attempts"] == 1  # never retried once text was out


async def test_events_end_at_done_and_blank_lines_ids_and_comments_are_skipped() -> None:
    events = await decoded(
        ": keep-alive",
        "",
        'data: {"a": 1}',
        "",
        "id: 7",
        'data: {"b":',
        "data: 2}",
        "",
        "data: [DONE]",
        "",
        'data: {"c": 3}',
    )
    assert events == [{"a": 1}, {"b": 2}]


async def test_a_last_event_without_its_blank_line_is_still_read() -> None:
    assert await decoded('data: {"a": 1}', "", 'data:{"b": 2}') == [{"a": 1}, {"b": 2}]


async def test_an_error_event_mid_stream_raises_the_sdks_api_error_after_the_events_before_it() -> None:
    seen: list[object] = []
    with pytest.raises(APIError, match="The waiting queue is full"):
        async for event in sse_json_events(
            lines_of('data: {"a": 1}', "", 'data: {"error":{"message":"The waiting queue is full.","code":"503"}}', "")
        ):
            seen.append(event)
    assert seen == [{"a": 1}]


async def test_an_event_that_is_not_json_is_a_stream_error_not_a_crash() -> None:
    with pytest.raises(StreamEventError, match="not JSON"):
        await decoded("data: {oops", "")


def test_the_parsers_read_the_fields_of_decoded_events() -> None:
    chat = ChatStreamParser()
    assert (
        chat.feed({"choices": [{"index": 0, "delta": {"reasoning_content": "hm", "reasoning": "hm"}}]})[0].text == "hm"
    )
    assert [d.text for d in chat.feed({"choices": [{"index": 0, "delta": {"content": "Hi"}}]})] == ["Hi"]
    assert chat.feed({"choices": [{"index": 1, "delta": {"content": "other choice"}}]}) == []
    chat.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chat.feed({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
    assert chat.finished and chat.usage is not None and chat.usage.total_tokens == 5

    responses = ResponsesStreamParser()
    assert [d.text for d in responses.feed({"type": "response.output_text.delta", "delta": "Hi"})] == ["Hi"]
    responses.feed(
        {
            "type": "response.completed",
            "response": {"status": "completed", "usage": {"input_tokens": 4, "output_tokens": 1}},
        }
    )
    assert responses.finished and responses.status == "completed"
    assert responses.usage is not None and responses.usage.total_tokens == 5
    with pytest.raises(StreamEventError, match="rate_limit"):
        responses.feed({"type": "response.failed", "response": {"error": {"code": "rate_limit"}}})
