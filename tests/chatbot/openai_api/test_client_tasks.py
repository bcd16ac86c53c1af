"""Chat clients' background tasks (titles, tags, follow-ups) and their chats, through the ASGI application offline:
Open WebUI's request bodies (`fixtures/open_webui/`), LibreChat's and LobeChat's title prompts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chatbot.apikeys.models import ApiKey
from chatbot.apikeys.services import TASK_RATE_FACTOR, CreatedKey
from chatbot.models import Conversation, Message
from chatbot.streaming import pending_records
from tests.chatbot.openai_api.conftest import MakeKey
from tests.chatbot.openai_api.helpers import COMPLETIONS, api_request, chunks_of, completion_body

pytestmark = pytest.mark.django_db(transaction=True)

FIXTURES = Path(__file__).parent / "fixtures" / "open_webui"


def fixture(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return body


def encoded(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode()


async def task_reply(secret: str, body: dict[str, Any]) -> str:
    response = await api_request(COMPLETIONS, encoded(body), secret=secret)
    assert response.status == 200, response.body[:300]
    completion = response.json()
    assert completion["object"] == "chat.completion" and completion["choices"][0]["finish_reason"] == "stop"
    content: str = completion["choices"][0]["message"]["content"]
    return content


async def test_open_webui_title_tags_and_follow_ups_are_answered_in_its_json_and_never_recorded(
    chat_key: CreatedKey,
) -> None:
    title = json.loads(await task_reply(chat_key.secret, fixture("title.json")))
    tags = json.loads(await task_reply(chat_key.secret, fixture("tags.json")))
    follow_ups = json.loads(await task_reply(chat_key.secret, fixture("follow_ups.json")))

    assert title == {"title": "Reset my password"}
    assert tags["tags"][0] == "Help centre" and len(tags["tags"]) == 2, tags
    assert 1 <= len(follow_ups["follow_ups"]) <= 3
    assert all(isinstance(item, str) and item for item in follow_ups["follow_ups"])
    await pending_records()
    assert await Conversation.objects.acount() == 0 and await Message.objects.acount() == 0


async def test_a_task_prompt_longer_than_a_question_is_answered(chat_key: CreatedKey) -> None:
    body = fixture("follow_ups.json")
    body["messages"][0]["content"] = body["messages"][0]["content"].replace("USER:", "USER: " + "x " * 1500, 1)
    assert len(body["messages"][0]["content"]) > 2000

    assert "follow_ups" in json.loads(await task_reply(chat_key.secret, body))


async def test_a_chinese_title_comes_from_the_question(chat_key: CreatedKey) -> None:
    body = fixture("title.json")
    content = body["messages"][0]["content"]
    body["messages"][0]["content"] = content.replace("How do I reset my password?", "如何重設密碼？")

    assert json.loads(await task_reply(chat_key.secret, body)) == {"title": "重設密碼"}


async def test_librechat_and_lobechat_titles_are_plain_text(chat_key: CreatedKey) -> None:
    librechat = {
        "model": "chat",
        "messages": [
            {
                "role": "user",
                "content": "Provide a concise, 5-word-or-less title for the conversation, using its same language, "
                "with no punctuation. Apply title case conventions appropriate for the language. Never directly "
                'mention the language name or the word "title" and only return the title itself.\n\n'
                "Conversation:\nUser: How do I reset my password?\nAI: Choose Forgot password [1].",
            }
        ],
    }
    lobechat = {
        "model": "chat",
        "messages": [
            {
                "role": "system",
                "content": "You are an assistant skilled in conversation. You need to summarize the user's "
                "conversation into a title within 10 words.",
            },
            {"role": "user", "content": "user: 如何重設密碼？\nassistant: 請在登入頁選擇「忘記密碼」[1]。"},
        ],
    }

    assert await task_reply(chat_key.secret, librechat) == "Reset my password"
    assert await task_reply(chat_key.secret, lobechat) == "重設密碼"


async def test_a_streamed_task_is_one_content_chunk_then_done(chat_key: CreatedKey) -> None:
    body = fixture("title.json") | {"stream": True, "stream_options": {"include_usage": True}}
    response = await api_request(COMPLETIONS, encoded(body), secret=chat_key.secret)

    chunks = chunks_of(response.body)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert json.loads(text) == {"title": "Reset my password"}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 0


async def test_tasks_do_not_use_up_the_questions_rate_limit(make_key: MakeKey) -> None:
    limited = await make_key(scopes=["chat"], rate_limit_per_minute=1)

    for _ in range(TASK_RATE_FACTOR):
        await task_reply(limited.secret, fixture("title.json"))
    question = await api_request(COMPLETIONS, completion_body(), secret=limited.secret)
    assert question.status == 200

    another_task = await api_request(COMPLETIONS, encoded(fixture("tags.json")), secret=limited.secret)
    assert another_task.status == 429 and "background tasks" in another_task.json()["error"]["message"]
    key = await ApiKey.objects.aget(pk=limited.key.pk)
    assert key.requests == TASK_RATE_FACTOR + 1


async def test_open_webui_chat_with_its_tools_is_answered_with_url_citation_annotations(chat_key: CreatedKey) -> None:
    response = await api_request(COMPLETIONS, encoded(fixture("chat_with_tools.json")), secret=chat_key.secret)

    assert response.status == 200
    chunks = chunks_of(response.body)
    assert not any("tool_calls" in c["choices"][0]["delta"] for c in chunks if c["choices"])
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    annotated = [c for c in chunks if c["choices"] and "annotations" in c["choices"][0]["delta"]]
    assert len(annotated) == 1
    final = next(c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"] == "stop")
    annotations = annotated[0]["choices"][0]["delta"]["annotations"]
    assert [a["url_citation"]["url"] for a in annotations] == final["citations"]
    for annotation, source in zip(annotations, final["search_results"], strict=True):
        assert annotation["type"] == "url_citation"
        citation = annotation["url_citation"]
        assert text[citation["start_index"] : citation["end_index"]] == f"[{source['ref']}]"
        assert citation["title"] == source["title"]


async def test_the_whole_answer_carries_its_annotations_on_the_message(chat_key: CreatedKey) -> None:
    response = await api_request(COMPLETIONS, completion_body("如何重設密碼？"), secret=chat_key.secret)

    message = response.json()["choices"][0]["message"]
    assert message["annotations"], message
    first = message["annotations"][0]["url_citation"]
    assert message["content"][first["start_index"] : first["end_index"]] == "[1]"


async def test_more_concise_shortens_the_previous_answer_without_a_new_search(chat_key: CreatedKey) -> None:
    first = await api_request(COMPLETIONS, completion_body(), secret=chat_key.secret)
    previous = first.json()["choices"][0]["message"]["content"]
    body = fixture("regenerate_more_concise.json")  # Open WebUI's: question, answer, question, answer, "More Concise"
    body["messages"][-2]["content"] = previous

    response = await api_request(COMPLETIONS, encoded(body), secret=chat_key.secret)

    chunks = chunks_of(response.body)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text and len(text) < len(previous)
    await pending_records()
    transformed = await Message.objects.filter(role="assistant").order_by("-created_at").afirst()
    assert transformed is not None and transformed.intent == "conversation_followup"


async def test_more_concise_keeps_what_answered_the_question(chat_key: CreatedKey) -> None:
    # As Open WebUI sent it: the answer to "How long is the reset link valid?" says so in its last sentence.
    response = await api_request(COMPLETIONS, encoded(fixture("regenerate_more_concise.json")), secret=chat_key.secret)

    chunks = chunks_of(response.body)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert "valid for 30 minutes" in text
    assert "Select Send reset link" not in text


async def test_form_links_are_absolute_with_public_base_url(chat_key: CreatedKey, settings: Any) -> None:
    settings.PUBLIC_BASE_URL = "https://help.example.org"
    from rag import wiring

    wiring.reset_runtime()
    try:
        response = await api_request(COMPLETIONS, completion_body("請問要下載哪一份申請表？"), secret=chat_key.secret)
    finally:
        wiring.reset_runtime()

    completion = response.json()
    forms = [s for s in completion["search_results"] if s.get("kind") == "form"]
    assert forms, completion["search_results"]
    assert all(s["download_url"].startswith("https://help.example.org/forms/") for s in forms)
    assert "https://help.example.org/forms/" in completion["choices"][0]["message"]["content"]
