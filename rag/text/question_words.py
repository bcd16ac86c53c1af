"""Chinese question scaffolding: the words that ask (請問、如何、多少、哪一、嗎) rather than name what is asked about.

A passage rarely contains them, so matched as character bigrams they only add noise: "哪一年" brings the bigram
一年, found in any paragraph with a date. The offline rules cut them out before comparing a question with a
passage, and the BM25 query leaves them out (documents are indexed whole).
"""

from __future__ import annotations

import re

# Traditional and Simplified. Longest first so 怎麼辦 goes before 怎麼. A lone 請 is left alone: it is half of 申請
# (apply), which matters here.
ZH_QUESTION_WORDS = (
    "可不可以 能不能 有沒有 有没有 為什麼 为什么 怎麼辦 怎么办 要怎麼 要怎么 該怎麼 该怎么 "
    "請問 请问 如何 怎麼 怎么 怎樣 怎样 什麼 什么 哪裡 哪里 哪些 哪個 哪个 在哪 "
    "是否 能否 可否 可以 需要 我要 我想 想要 應該 应该 一下 辦法 办法 您好 你好 "
    "那要 那麼 那么 要在 多久 多長 多长 多少 何時 何时 什麼時候 什么时候 "
    "甚麼 為何 为何 何種 何种 何者 何處 何处 哪一 哪位 哪種 哪种 誰 谁 "
    "在哪一 在哪個 在哪个 在哪些 在哪裡 在哪里 "
    "我 您 你 嗎 吗 呢 吧 啊 呀 喔 哦"
).split()
ZH_QUESTION_WORDS_RE = re.compile(
    "|".join(re.escape(w) for w in sorted(ZH_QUESTION_WORDS, key=len, reverse=True))
    # 的 and 了 are particles except in 的確 / 了解, which we keep.
    + "|的(?!確)|了(?!解)"
)


def without_question_words(text: str) -> str:
    """The text with the Chinese question scaffolding replaced by spaces (so the words around stay apart)."""
    return ZH_QUESTION_WORDS_RE.sub(" ", text)


# What a question asks for, by its interrogative: help articles are titled and sectioned with the questions they
# answer ("研習時數何時上傳", "How do I reset my password?"), and two questions of one kind about the same words
# ask the same thing however they are put ("要多久才會上傳" and "何時上傳" both ask for a time). Longest first
# within a kind; the kinds are tried in this order, so "how long" is a time before "how" is a manner.
QUESTION_KINDS: tuple[tuple[str, str], ...] = (
    ("time", r"多久|多長時間|多长时间|何時|何时|什麼時候|什么时候|甚麼時候|幾時|几时|\bhow (?:long|soon)\b|\bwhen\b"),
    ("quantity", r"多少|\bhow (?:many|much)\b"),
    ("reason", r"為什麼|为什么|為何|为何|\bwhy\b"),
    ("place", r"哪裡|哪里|在哪|何處|何处|\bwhere\b"),
    ("person", r"誰|谁|哪位|\bwho\b"),
    ("manner", r"如何|怎麼|怎么|怎樣|怎样|\bhow\b"),
    ("yes_no", r"是否|能否|可否|可不可以|能不能|有沒有|有没有|嗎|吗|^(?:is|are|can|do|does|will|should)\b"),
)
_KIND_RES = tuple((kind, re.compile(pattern, re.IGNORECASE)) for kind, pattern in QUESTION_KINDS)


def question_kind(text: str) -> str:
    """What the text asks for ("time", "quantity", "reason", "place", "person", "manner", "yes_no"), or "" when it
    asks nothing ("重設密碼步驟", "Reporting schedule")."""
    stripped = text.strip()
    for kind, pattern in _KIND_RES:
        if pattern.search(stripped):
            return kind
    return ""
