"""Language detection and Chinese script conversion for short help-centre questions.

Detection is by script, not by a statistical model: the platform only needs to tell Traditional Chinese,
Simplified Chinese, English and "something else" apart, and a model would be slow to load and unreliable on a
five-character question. Simplified vs Traditional is decided per character: a character that OpenCC changes
when converting to Simplified (and leaves alone the other way) is Traditional-only, and vice versa. Most
characters are shared, so a single distinctive character decides a short question ("如何重设密码" has two).

The OpenCC converters are pure Python (about 5 µs per character): they are built once, lazily, and callers
with long text (a previous answer) should convert off the event loop (`to_traditional_async`).
"""

from __future__ import annotations

import asyncio
import re
import threading
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import opencc

ZH_HANT = "zh-hant"
ZH_HANS = "zh-hans"
EN = "en"
OTHER = "other"

_HAN_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA_HANGUL_RE = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uac00-\ud7af\u1100-\u11ff]")
_LATIN_WORD_RE = re.compile(r"[A-Za-z\u00c0-\u024f]+")
_NON_ASCII_LATIN_RE = re.compile(r"[\u00c0-\u024f]")
# English words that almost every English question contains and other Latin-script languages lack.
_EN_MARKERS = frozenset(
    "the a an and or is are am was do does did can could how what when where why which who my i you your "
    "to of in on for with it not please this that have has help".split()
)
# Enough characters to decide; a long previous answer need not be scanned to the end.
_SAMPLE_HAN = 400
# Conversions above this many characters are worth a thread hop (OpenCC costs ~5 µs per character).
OFFLOAD_CHARS = 300

_converters: dict[str, opencc.OpenCC] = {}
_converters_lock = threading.Lock()


def converter(config: str) -> opencc.OpenCC:
    """The process-wide OpenCC converter for `config` ("s2twp", "s2t", "t2s"), built on first use."""
    conv = _converters.get(config)
    if conv is None:
        with _converters_lock:
            conv = _converters.get(config)
            if conv is None:
                import opencc  # imported late: loading its dictionaries takes ~80 ms

                conv = _converters[config] = opencc.OpenCC(config)
    return conv


@lru_cache(maxsize=16384)
def _han_script(char: str) -> int:
    """+1 for a Traditional-only character, -1 for a Simplified-only one, 0 when shared or ambiguous."""
    to_simplified = converter("t2s").convert(char)
    to_traditional = converter("s2t").convert(char)
    if to_simplified != char and to_traditional == char:
        return 1
    if to_traditional != char and to_simplified == char:
        return -1
    return 0


def chinese_script(text: str) -> str:
    """ZH_HANS when Simplified-only characters outnumber Traditional-only ones, else ZH_HANT.

    Ties (no distinctive character at all, e.g. "如何登入") go to Traditional, the platform's own script.
    """
    balance = 0
    for i, match in enumerate(_HAN_RE.finditer(text)):
        if i >= _SAMPLE_HAN:
            break
        balance += _han_script(match.group())
    return ZH_HANS if balance < 0 else ZH_HANT


def detect_language(text: str, *, default: str = ZH_HANT) -> str:
    """One of zh-hant, zh-hans, en, other; `default` when the text has no letters at all ("123?")."""
    han = len(_HAN_RE.findall(text))
    kana_hangul = len(_KANA_HANGUL_RE.findall(text))
    latin_words = _LATIN_WORD_RE.findall(text)
    letters = sum(1 for ch in text if ch.isalpha())
    if not letters:
        return default
    if kana_hangul and kana_hangul * 5 >= han + kana_hangul:
        return OTHER  # Japanese or Korean: kana/hangul are a fifth or more of the East Asian script
    latin_letters = sum(len(word) for word in latin_words)
    if han + kana_hangul + latin_letters < letters * 0.5:
        return OTHER  # mostly Cyrillic, Thai, Arabic, ...
    # A Chinese word is about 1.5 characters: compare word counts so "如何使用 LearnHub App 登入" is Chinese
    # and "Can I log in with my 自然人憑證?" is English.
    if han and han / 1.5 >= len(latin_words):
        return chinese_script(text)
    if not latin_words:
        return OTHER
    if _NON_ASCII_LATIN_RE.search(text) and not any(word.lower() in _EN_MARKERS for word in latin_words):
        return OTHER  # accented Latin script without a single common English word: French, Vietnamese, ...
    return EN


def is_chinese(language: str) -> bool:
    return language in (ZH_HANT, ZH_HANS)


def to_traditional(text: str) -> str:
    """Simplified -> Traditional with Taiwan phrasing (软件 -> 軟體)."""
    return converter("s2twp").convert(text) if text else text


def to_simplified(text: str) -> str:
    """Traditional -> Simplified, character by character (帳號 -> 帐号).

    Deliberately not `tw2sp`: its phrase table rewrites words that are fine as they are (線上 -> 在线 gives
    "在在线", 資料來源 -> 数据源), and a reader of Simplified understands Taiwan vocabulary.
    """
    return converter("t2s").convert(text) if text else text


async def to_traditional_async(text: str) -> str:
    """`to_traditional`, in a worker thread when the text is long enough to hold up the event loop."""
    if len(text) > OFFLOAD_CHARS:
        return await asyncio.to_thread(to_traditional, text)
    return to_traditional(text)


async def to_simplified_async(text: str) -> str:
    if len(text) > OFFLOAD_CHARS:
        return await asyncio.to_thread(to_simplified, text)
    return to_simplified(text)
