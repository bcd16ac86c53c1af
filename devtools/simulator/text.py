"""Deterministic prompt reading and answer text, in the language of the question.

Nothing here is clever: the answer is an extractive "summary" stitched from windows of the question and of
numbered sources (``[1] ...`` lines), with ``[n]`` citations when sources exist. The same prompt always gives
the same tokens, in any process, so tests can assert on content.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_CHAR = re.compile(f"[{_CJK}]")
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\-]*")
_SOURCE_LINE = re.compile(r"^\s*\[(\d{1,3})\][ \t:：]*(.*)$", re.MULTILINE)
_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})

_FILLER_EN = "the service answers questions from the help centre articles and cites its sources".split()
_FILLER_ZH = "本服務根據說明中心文章回答問題並引用來源"
_MAX_CITED_SOURCES = 3


def stable_hash(text: str) -> int:
    """A process-independent hash (``hash()`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def estimate_tokens(text: str) -> int:
    """Rough BPE count: one token per CJK character, one per 4 other characters."""
    cjk = len(_CJK_CHAR.findall(text))
    return cjk + math.ceil((len(text) - cjk) / 4)


def content_text(content: Any) -> str:
    """Text of a chat/responses message content: a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") in _TEXT_PART_TYPES
        ]
        return "\n".join(parts)
    return ""


@dataclass(frozen=True)
class Prompt:
    """What the simulator understands of a request: all text, the last user turn and the turn count."""

    full_text: str
    question: str
    message_count: int

    @classmethod
    def from_messages(cls, messages: Sequence[Any], instructions: str = "") -> Prompt:
        texts = [instructions] if instructions else []
        question = ""
        count = 0
        for message in messages:
            if not isinstance(message, dict):
                continue
            count += 1
            text = content_text(message.get("content"))
            texts.append(text)
            if message.get("role", "user") == "user":
                question = text
        return cls(full_text="\n".join(texts), question=question, message_count=count + bool(instructions))

    @classmethod
    def from_responses_input(cls, input_value: Any, instructions: Any) -> Prompt:
        instructions_text = instructions if isinstance(instructions, str) else ""
        if isinstance(input_value, str):
            return cls.from_messages([{"role": "user", "content": input_value}], instructions_text)
        items = input_value if isinstance(input_value, list) else []
        # Input items without a type are messages; typed ones other than "message" carry no prompt text.
        messages = [i for i in items if isinstance(i, dict) and i.get("type", "message") == "message"]
        return cls.from_messages(messages, instructions_text)

    @cached_property
    def chinese(self) -> bool:
        sample = self.topic or self.full_text
        cjk = len(_CJK_CHAR.findall(sample))
        latin = len(_WORD.findall(sample))
        return cjk > 0 and cjk >= latin

    @cached_property
    def topic(self) -> str:
        """The last user turn without its numbered-source lines: what was actually asked."""
        stripped = _SOURCE_LINE.sub("", self.question).strip()
        return stripped or self.question

    @cached_property
    def sources(self) -> dict[int, str]:
        found: dict[int, str] = {}
        for match in _SOURCE_LINE.finditer(self.full_text):
            found.setdefault(int(match.group(1)), match.group(2).strip())
        return found

    @cached_property
    def prompt_tokens(self) -> int:
        # Plus chat-template framing: a few tokens per message and the assistant turn header.
        return estimate_tokens(self.full_text) + 4 * self.message_count + 3

    def answer_tokens(self, count: int) -> list[str]:
        prefix = "摘要：" if self.chinese else "Summary:"
        return _take(self._tokens(prefix, cite=True), count)

    def reasoning_tokens(self, count: int) -> list[str]:
        prefix = "思考：" if self.chinese else "Thinking:"
        return _take(self._tokens(prefix, cite=False), count)

    def _tokens(self, prefix: str, *, cite: bool) -> Iterator[str]:
        rng = random.Random(stable_hash(prefix + self.full_text))
        citations = sorted(self.sources)[:_MAX_CITED_SOURCES] if cite else []
        if self.chinese:
            return _chinese_tokens(prefix, self._pool(chinese=True), rng, citations)
        return _english_tokens(prefix, self._pool(chinese=False), rng, citations)

    def _pool(self, *, chinese: bool) -> list[list[str]]:
        """Word (or CJK character) sequences to quote from: the question first, then each source."""
        texts = [self.topic, *self.sources.values()]
        if chinese:
            runs = [list(run) for text in texts for run in _CJK_RUN.findall(text)]
            return [run for run in runs if run] or [list(_FILLER_ZH)]
        words = [_WORD.findall(text) for text in texts]
        return [w for w in words if w] or [_FILLER_EN]


def _take(tokens: Iterator[str], count: int) -> list[str]:
    return [token for _, token in zip(range(count), tokens, strict=False)]


def _window(rng: random.Random, pool: list[list[str]], length: int) -> list[str]:
    sequence = rng.choice(pool)
    start = rng.randrange(max(len(sequence) - length, 0) + 1)
    return sequence[start : start + length]


def _english_tokens(prefix: str, pool: list[list[str]], rng: random.Random, cites: list[int]) -> Iterator[str]:
    yield prefix
    first = pool[0][:8]
    sentence_index = 0
    while True:
        words = first if sentence_index == 0 else _window(rng, pool, rng.randint(6, 12))
        for word in words:
            yield " " + word
        if cites:
            yield f" [{cites[sentence_index % len(cites)]}]"
        yield "."
        sentence_index += 1


def _chinese_tokens(prefix: str, pool: list[list[str]], rng: random.Random, cites: list[int]) -> Iterator[str]:
    yield from prefix
    first = pool[0][:12]
    sentence_index = 0
    while True:
        yield from first if sentence_index == 0 else _window(rng, pool, rng.randint(8, 16))
        if cites:
            yield f"[{cites[sentence_index % len(cites)]}]"
        yield "。"
        sentence_index += 1


def chunk_text(text: str, size: int = 4) -> list[str]:
    """Split text (e.g. a JSON document) into token-sized pieces for streaming."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
