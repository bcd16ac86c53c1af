"""A client's background task answered without the help-centre pipeline.

With an LLM configured, the LLM answers the client's own prompt directly: a small output (`TASK_MAX_TOKENS`),
the lowest priority (served only when no person's answer waits for a slot), a short wait for the slot, never
cached, never recorded as a conversation, never counted as a question. A reply that is not the JSON object the
prompt asks for, or a call that cannot start or fails, falls back to the rules. Offline, rules answer:

- title: the person's question, its question words and punctuation taken off ("How do I reset my password?" ->
  "Reset my password", "如何重設密碼？" -> "重設密碼");
- tags: the planner rules' intent and the top source's title;
- follow-ups: the titles of the next related articles (in the question's language), as the person could send them;
- queries: the question itself; autocompletion and image prompts: nothing (an empty text).

The answer has the shape the client asked for: the JSON object with its key (Open WebUI) or plain text (LibreChat,
LobeChat).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from chatbot.openai_api.tasks import (
    AUTOCOMPLETE,
    FOLLOW_UPS,
    IMAGE_PROMPT,
    QUERIES,
    TAGS,
    TITLE,
    ClientTask,
)
from rag.errors import PipelineAbort
from rag.llm.errors import InvalidLLMOutput
from rag.llm.policy import SlotTerms
from rag.rules.planner_rules import FORM_DOWNLOAD, FORM_EXPORT, OUT_OF_SCOPE, plan_offline
from rag.text.language import EN, detect_language, is_chinese
from rag.values import RetrievedChunk

logger = logging.getLogger(__name__)

NODE = "client_task"  # the name its LLM calls are reported, limited and configured under (LLM_NODE_MODELS)
TASK_MAX_TOKENS = 200
TASK_SLOT = SlotTerms(wait=5.0, low_priority=True, auxiliary=NODE)
TASK_TIMEOUT = 20.0
SEARCH_TIMEOUT = 5.0
TITLE_MAX_CHARS = 40
FOLLOW_UPS_MAX = 3

_INTENT_TAGS = {
    EN: {FORM_DOWNLOAD: "Forms", FORM_EXPORT: "Forms", OUT_OF_SCOPE: "General"},
    "zh": {FORM_DOWNLOAD: "表單", FORM_EXPORT: "表單", OUT_OF_SCOPE: "一般"},
}
_HELP_TAG = {EN: "Help centre", "zh": "常見問題"}
_QUESTION_WORDS_RE = re.compile(
    r"^(?:please |can you |could you )?(?:tell me )?(?:how (?:do|can|should|would) (?:i|we|you) |how to |"
    r"what (?:is|are) (?:the )?|where (?:do|can) (?:i|we) |can i |is it possible to )",
    re.IGNORECASE,
)
_ZH_QUESTION_WORDS_RE = re.compile(
    r"^(?:請問|请问|想問|想问|我想知道|我要|我想)?(?:如何|怎麼|怎么|怎樣|怎样|要怎麼|要怎么)?"
)
_ZH_TAIL_RE = re.compile(r"(?:呢|嗎|吗|啊|呀)$")
_PUNCTUATION_RE = re.compile(r"[\s?？!！。．.,，、:：;；\"'「」『』（）()]+$")
_FENCE_RE = re.compile(r"^```(?:json)?\s*|\s*```$")


@dataclass(frozen=True, slots=True)
class TaskAnswer:
    text: str
    answered_by: str  # "llm" or "rules"
    prompt_tokens: int = 0
    completion_tokens: int = 0


async def client_task_answer(task: ClientTask, *, backend: str, deps: Any) -> TaskAnswer:
    """The task's answer: the LLM's when one is configured and its reply fits, else the rules'."""
    llm = getattr(deps, "llm", None)
    if llm is not None:
        try:
            return await _by_llm(task, backend=backend, llm=llm)
        except (PipelineAbort, InvalidLLMOutput, TimeoutError) as exc:
            logger.info("client task %s: the rules answer (%s)", task.kind, type(exc).__name__)
    return TaskAnswer(await rules_answer(task, retriever=deps.retriever), "rules")


async def _by_llm(task: ClientTask, *, backend: str, llm: Any) -> TaskAnswer:
    result = await llm.complete(
        backend=backend,
        node=NODE,
        messages=[{"role": turn.role, "content": turn.content} for turn in task.prompt],
        max_tokens=TASK_MAX_TOKENS,
        total_timeout=TASK_TIMEOUT,
        slot=TASK_SLOT,
    )
    text = reply_checked(task, result.text)
    usage = result.usage
    return TaskAnswer(text, "llm", int(usage.input_tokens), int(usage.output_tokens))


def reply_checked(task: ClientTask, reply: str) -> str:
    """The LLM's reply as the client wants it; InvalidLLMOutput when it is not (the rules answer then)."""
    text = _FENCE_RE.sub("", reply.strip()).strip()
    if not task.json_key:
        text = text.strip("\"'「」 \n")
        if not text or len(text) > 200:
            raise InvalidLLMOutput(f"a title of {len(text)} characters")
        return text
    start, end = text.find("{"), text.rfind("}")
    try:
        parsed = json.loads(text[start : end + 1]) if start >= 0 < end else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or task.json_key not in parsed:
        raise InvalidLLMOutput(f"not a JSON object with {task.json_key!r}")
    return json.dumps(parsed, ensure_ascii=False)


async def rules_answer(task: ClientTask, *, retriever: Any) -> str:
    question = task.question
    language = detect_language(question or task.text, default=EN)
    value: Any
    if task.kind == TITLE:
        value = title_from_question(question)
    elif task.kind == TAGS:
        value = await _tags(question, language, retriever)
    elif task.kind == FOLLOW_UPS:
        value = await _follow_ups(question, language, retriever)
    elif task.kind == QUERIES:
        value = [question] if question else []
    elif task.kind in (AUTOCOMPLETE, IMAGE_PROMPT):
        value = ""
    else:
        value = ""
    if not task.json_key:
        return str(value)
    return json.dumps({task.json_key: value}, ensure_ascii=False)


def title_from_question(question: str) -> str:
    """A short title from the person's question: its question words and end punctuation taken off."""
    text = " ".join(question.split())
    if not text:
        return "New chat"
    if is_chinese(detect_language(text)):
        short = _ZH_TAIL_RE.sub("", _PUNCTUATION_RE.sub("", _ZH_QUESTION_WORDS_RE.sub("", text, count=1))) or text
        return short[:TITLE_MAX_CHARS]
    short = _PUNCTUATION_RE.sub("", _QUESTION_WORDS_RE.sub("", text, count=1)) or text
    words = short.split()[:6]
    title = " ".join(words)[:TITLE_MAX_CHARS]
    return title[:1].upper() + title[1:]


def _words(language: str) -> str:
    return "zh" if is_chinese(language) else EN


async def _search(question: str, language: str, retriever: Any, limit: int) -> list[RetrievedChunk]:
    if not question.strip():
        return []
    try:
        async with asyncio.timeout(SEARCH_TIMEOUT):
            chunks: list[RetrievedChunk] = await retriever.search(question, limit=limit, language=language)
    except (TimeoutError, OSError, RuntimeError) as exc:
        logger.warning("client task search failed: %r", exc)
        return []
    return chunks


async def _tags(question: str, language: str, retriever: Any) -> list[str]:
    words = _words(language)
    intent = plan_offline(question, previous_answer="").intent
    tags = [_INTENT_TAGS[words].get(intent, _HELP_TAG[words])]
    if intent != OUT_OF_SCOPE:
        top = await _search(question, language, retriever, limit=1)
        if top and top[0].title and top[0].title not in tags:
            tags.append(top[0].title)
    return tags


async def _follow_ups(question: str, language: str, retriever: Any) -> list[str]:
    chunks = await _search(question, language, retriever, limit=12)
    titles: list[str] = []
    seen: set[str] = set()
    for chunk in chunks:
        if chunk.doc_id in seen or not chunk.title:
            continue
        seen.add(chunk.doc_id)
        titles.append(chunk.title)
    # The first is the article that answered; the next ones are related. Their titles are what a person would
    # send ("My account is locked", "帳號被鎖定怎麼辦"), and asked, each is answered from its own article.
    return titles[1 : FOLLOW_UPS_MAX + 1]
