"""A chat client's background tasks, told apart from a person's questions.

Chat front ends ask the selected model for small things beside the answers: a chat title, tags, follow-up
suggestions, search queries, the rest of a sentence being typed. They arrive as ordinary chat completions whose
last message is the client's own prompt, with the conversation pasted inside it. Answered by the help-centre
pipeline, each became a recorded "question" with sources, so titles fell back to the question and there were no
tags or suggestions. They are recognised here by the prompts the clients ship:

- Open WebUI (0.12.x, `backend/open_webui/config.py`, `DEFAULT_*_PROMPT_TEMPLATE`): one user message that starts
  with `### Task:`; the conversation between `<chat_history>` tags as `USER: ...` / `ASSISTANT: ...` lines; the
  JSON key it asks for names the task (`title`, `tags`, `follow_ups`, `queries`, `text` for autocompletion,
  `prompt` for an image prompt). A deployment's own template that keeps the `### Task:` opening and a JSON key is
  recognised the same way.
- LibreChat (`@librechat/agents`, the completion title prompt): "Provide a concise, 5-word-or-less title for the
  conversation ... Conversation:" then `User: ...` / `AI: ...` lines; a plain-text title.
- LobeChat (its summary-title chain): a system message asking to "summarize the user's conversation into a title"
  (or 总结/總結 ... 标题/標題), the conversation as the user message; a plain-text title.

What is answered, and how, is `chatbot.openai_api.task_answers`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rag.values import Turn

TITLE = "title"
TAGS = "tags"
FOLLOW_UPS = "follow_ups"
QUERIES = "queries"
AUTOCOMPLETE = "autocomplete"
IMAGE_PROMPT = "image_prompt"
KINDS = (TITLE, TAGS, FOLLOW_UPS, QUERIES, AUTOCOMPLETE, IMAGE_PROMPT)

OPEN_WEBUI = "open-webui"
LIBRECHAT = "librechat"
LOBECHAT = "lobechat"

# Open WebUI's JSON key -> the task it asks for
_JSON_KEYS = {"title": TITLE, "tags": TAGS, "follow_ups": FOLLOW_UPS, "queries": QUERIES, "text": AUTOCOMPLETE}
_JSON_KEYS["prompt"] = IMAGE_PROMPT
_OPEN_WEBUI_RE = re.compile(r"^\s*###\s*Task:", re.IGNORECASE)
_JSON_KEY_RE = re.compile(r'\{\s*"(title|tags|follow_ups|queries|text|prompt)"\s*:')
_CHAT_HISTORY_RE = re.compile(r"<chat_history>(.*?)</chat_history>", re.DOTALL)
_TEXT_RE = re.compile(r"<text>(.*?)</text>", re.DOTALL)
_LIBRECHAT_RE = re.compile(r"5-word-or-less title for the conversation", re.IGNORECASE)
_LOBECHAT_RE = re.compile(
    r"summari[sz]e (?:the )?user'?s? conversation into a title|(?:总结|總結|概括).{0,20}(?:标题|標題)", re.IGNORECASE
)
# One turn of a pasted conversation: "USER: ..." (Open WebUI), "User: ..." / "AI: ..." (LibreChat), "user: ...".
_TURN_RE = re.compile(r"^(USER|ASSISTANT|User|Assistant|AI|user|assistant|Human|human)\s*:[ \t]?", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class ClientTask:
    kind: str  # one of KINDS
    client: str  # OPEN_WEBUI, LIBRECHAT, LOBECHAT
    json_key: str  # the key of the JSON object asked for; "" for a plain-text answer
    prompt: tuple[Turn, ...]  # the request's messages, as the client wrote them (the LLM answers these)
    chat: tuple[Turn, ...]  # the conversation the task is about, as pasted into the prompt
    text: str = ""  # autocompletion: the text being typed

    @property
    def question(self) -> str:
        """The person's last question in the pasted conversation ("" when there is none)."""
        return next((turn.content for turn in reversed(self.chat) if turn.role == "user"), "")

    @property
    def answer(self) -> str:
        """The assistant's last answer in the pasted conversation ("" when there is none)."""
        return next((turn.content for turn in reversed(self.chat) if turn.role == "assistant"), "")


def client_task_detect(messages: Sequence[Turn]) -> ClientTask | None:
    """The background task these messages ask for, or None when the last message is a person's question."""
    if not messages or messages[-1].role != "user":
        return None
    last = messages[-1].content
    prompt = tuple(messages)
    if _OPEN_WEBUI_RE.match(last):
        key = _JSON_KEY_RE.search(last)
        if key is None:
            return None
        history = _CHAT_HISTORY_RE.search(last)
        chat = pasted_turns(history.group(1)) if history else ()
        typed = _TEXT_RE.search(last)
        return ClientTask(
            _JSON_KEYS[key.group(1)], OPEN_WEBUI, key.group(1), prompt, chat, typed.group(1).strip() if typed else ""
        )
    if _LIBRECHAT_RE.search(last):
        _, _, conversation = last.partition("Conversation:")
        return ClientTask(TITLE, LIBRECHAT, "", prompt, pasted_turns(conversation))
    if any(turn.role in ("system", "developer") and _LOBECHAT_RE.search(turn.content) for turn in messages):
        return ClientTask(TITLE, LOBECHAT, "", prompt, pasted_turns(last) or (Turn("user", last.strip()),))
    return None


def pasted_turns(text: str) -> tuple[Turn, ...]:
    """A conversation pasted into a prompt as `ROLE: text` lines (a turn runs until the next role)."""
    marks = list(_TURN_RE.finditer(text))
    turns = []
    for mark, after in zip(marks, [*marks[1:], None], strict=True):
        content = text[mark.end() : after.start() if after else len(text)].strip()
        role = "user" if mark.group(1).lower() in ("user", "human") else "assistant"
        if content:
            turns.append(Turn(role=role, content=content))
    return tuple(turns)
