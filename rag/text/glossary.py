"""A bilingual glossary: the terms of a question found in it, given in the other language.

An English question ("How long are lecture recordings kept?") shares no token with the zh-hant page that answers
it, and the reverse; offline there is no model to bridge them. The glossary (`rag.text.glossary_data`) maps common
help-centre terms between English and Traditional Chinese, so the sparse query can also ask for 錄影 when it
asks for "recording" (`rag.retrieval.sparse.QueryExpansion` adds them, weighted below the question's own terms).

English is matched on lightly stemmed words (plural s, -ing, -ed and a final e removed, the same on both sides:
"recordings" finds "recording"), longest phrase first at each word; Chinese as substrings of the question.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import cache

from rag.text.glossary_data import ENTRIES
from rag.text.tokenize import LATIN_WORD, normalize

_WORD_RE = re.compile(LATIN_WORD)
_HAN_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def stem(word: str) -> str:
    """A crude English stem, enough to match a glossary entry's inflections: "recordings", "recorded",
    "recording" -> "record"; "expires" -> "expir"."""
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) > len(suffix) + 2:
            word = word[: -len(suffix)]
            break
    if word.endswith("e") and len(word) > 4:
        word = word[:-1]
    return word


def _words(text: str) -> list[str]:
    return [stem(word) for word in _WORD_RE.findall(normalize(text))]


class Glossary:
    """English phrases <-> Traditional Chinese terms, looked up in questions."""

    def __init__(self, pairs: Iterable[tuple[str, Sequence[str]]]) -> None:
        self._english: dict[tuple[str, ...], list[str]] = {}
        self._chinese: dict[str, list[str]] = {}
        for english, chinese in pairs:
            key = tuple(_words(english))
            if not key:
                continue
            found = self._english.setdefault(key, [])
            found += [term for term in chinese if term not in found]
            for term in chinese:
                # one character matches inside unrelated words (天 in 今天, 聊天): it only expands English
                if len(_HAN_RE.findall(term)) >= 2:
                    known = self._chinese.setdefault(normalize(term), [])
                    if english not in known:
                        known.append(english)
        self._longest_english = max((len(key) for key in self._english), default=0)
        self._longest_chinese = max((len(term) for term in self._chinese), default=0)

    def __len__(self) -> int:
        return len(self._english)

    @classmethod
    def parse(cls, text: str) -> Glossary:
        """Lines of `english = 中文|中文`; blank lines and lines without `=` are skipped."""
        pairs = []
        for line in text.splitlines():
            english, equals, chinese = line.partition("=")
            if equals and english.strip():
                pairs.append((english.strip(), [term.strip() for term in chinese.split("|") if term.strip()]))
        return cls(pairs)

    def translations(self, text: str) -> list[str]:
        """The other-language terms of every glossary term in `text` (English and Chinese alike), each once, in
        the order found."""
        return list(dict.fromkeys(term for _, group in self.matches(text) for term in group))

    def matches(self, text: str) -> list[tuple[str, list[str]]]:
        """Each glossary term found in `text` (English and Chinese alike), in the order found, as written there
        (English: its stemmed words), with its translations: the alternatives the other language may use."""
        return self._english_translations(_words(text)) + self._chinese_translations(normalize(text))

    def _english_translations(self, words: list[str]) -> list[tuple[str, list[str]]]:
        found: list[tuple[str, list[str]]] = []
        for start in range(len(words)):
            for length in range(min(self._longest_english, len(words) - start), 0, -1):
                key = tuple(words[start : start + length])
                terms = self._english.get(key)
                if terms is not None:
                    found.append((" ".join(key), terms))
                    break
        return found

    def _chinese_translations(self, text: str) -> list[tuple[str, list[str]]]:
        found: list[tuple[str, list[str]]] = []
        for start in range(len(text)):
            for length in range(min(self._longest_chinese, len(text) - start), 1, -1):
                source = text[start : start + length]
                terms = self._chinese.get(source)
                if terms is not None:
                    found.append((source, terms))
        return found


@cache
def builtin_glossary() -> Glossary:
    """The glossary of `rag.text.glossary_data`, parsed once."""
    return Glossary.parse(ENTRIES)
