"""Which requests are a chat client's background task, and what the task is about."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from chatbot.openai_api.task_answers import TASK_MAX_TOKENS, client_task_answer, reply_checked, title_from_question
from chatbot.openai_api.tasks import FOLLOW_UPS, OPEN_WEBUI, TAGS, TITLE, ClientTask, client_task_detect
from rag.llm.errors import InvalidLLMOutput
from rag.llm.policy import SlotTerms
from rag.llm.types import LLMResult
from rag.values import Turn, Usage

FIXTURES = Path(__file__).parent / "fixtures" / "open_webui"


def turns_of(name: str) -> list[Turn]:
    body = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return [Turn(m["role"], m["content"]) for m in body["messages"]]


@pytest.mark.parametrize(
    ("name", "kind"), [("title.json", TITLE), ("tags.json", TAGS), ("follow_ups.json", FOLLOW_UPS)]
)
def test_open_webui_tasks_are_told_by_the_json_key_they_ask_for(name: str, kind: str) -> None:
    task = client_task_detect(turns_of(name))

    assert task is not None and task.kind == kind and task.client == OPEN_WEBUI and task.json_key == kind
    assert task.question == "How do I reset my password?"
    # Open WebUI asks for the title as the question is sent, before any answer
    assert task.answer == "" if kind == TITLE else task.answer.startswith("If you have forgotten your")


@pytest.mark.parametrize("name", ["chat_with_tools.json", "chat_zh_with_tools.json", "regenerate_more_concise.json"])
def test_people_s_questions_are_not_tasks(name: str) -> None:
    assert client_task_detect(turns_of(name)) is None


@pytest.mark.parametrize(
    "question",
    [
        "### Task: my course page says 'task failed', what do I do?",  # no JSON asked for
        "Can you give my certificate a title?",
        "Provide a concise title for my thesis",
    ],
)
def test_a_question_that_speaks_of_tasks_or_titles_is_a_question(question: str) -> None:
    assert client_task_detect([Turn("user", question)]) is None


def test_a_task_earlier_in_the_chat_does_not_make_the_last_question_one() -> None:
    turns = [*turns_of("title.json"), Turn("assistant", "{}"), Turn("user", "How do I reset my password?")]

    assert client_task_detect(turns) is None


@pytest.mark.parametrize(
    ("question", "title"),
    [
        ("How do I reset my password?", "Reset my password"),
        ("What is the refund policy for courses?", "Refund policy for courses"),
        ("如何重設密碼？", "重設密碼"),
        ("請問證書要怎麼下載呢？", "證書要怎麼下載"),
        ("", "New chat"),
    ],
)
def test_an_offline_title_is_the_question_without_its_question_words(question: str, title: str) -> None:
    assert title_from_question(question) == title


def test_an_llm_reply_must_be_the_json_object_asked_for() -> None:
    task = client_task_detect(turns_of("title.json"))
    assert isinstance(task, ClientTask)

    assert json.loads(reply_checked(task, '```json\n{ "title": "Password Reset" }\n```')) == {"title": "Password Reset"}
    with pytest.raises(InvalidLLMOutput):
        reply_checked(task, "Password Reset")
    with pytest.raises(InvalidLLMOutput):
        reply_checked(task, '{"tags": ["x"]}')


class _Replying:
    """An LLM backend that answers every call with one reply, and keeps what it was asked."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.calls: list[dict[str, object]] = []

    async def complete(self, **kwargs: object) -> LLMResult:
        self.calls.append(kwargs)
        return LLMResult(text=self.reply, usage=Usage(input_tokens=300, output_tokens=9, total_tokens=309))


class _NoSearch:
    async def search(self, query: str, *, limit: int, language: str | None = None, kind: str | None = None) -> list:
        return []


async def test_with_an_llm_the_client_s_own_prompt_is_answered_small_and_last_in_line() -> None:
    task = client_task_detect(turns_of("title.json"))
    assert task is not None
    llm = _Replying('{ "title": "Password Reset" }')

    answer = await client_task_answer(task, backend="chat", deps=SimpleNamespace(llm=llm, retriever=_NoSearch()))

    assert (answer.text, answer.answered_by, answer.prompt_tokens) == ('{"title": "Password Reset"}', "llm", 300)
    (call,) = llm.calls
    assert call["messages"] == [{"role": "user", "content": task.prompt[0].content}]
    assert call["max_tokens"] == TASK_MAX_TOKENS
    slot = call["slot"]
    assert isinstance(slot, SlotTerms) and slot.low_priority


async def test_an_llm_reply_that_is_not_the_json_asked_for_gives_way_to_the_rules() -> None:
    task = client_task_detect(turns_of("title.json"))
    assert task is not None
    deps = SimpleNamespace(llm=_Replying("Sure! Here is a title: Password Reset"), retriever=_NoSearch())

    answer = await client_task_answer(task, backend="chat", deps=deps)

    assert (answer.text, answer.answered_by) == ('{"title": "Reset my password"}', "rules")
