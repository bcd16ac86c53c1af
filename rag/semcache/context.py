"""Whether a question's answer may come from, or go to, the semantic cache: only context-free ones may.

A cached answer was computed from the question alone, so it may only be served where the conversation would
not have changed it. Without a conversation (no history, no running summary) the question is all the pipeline
sees, and the cache holds exactly what it would answer. Mid-conversation the same words may mean something else
("How much?", "學生呢？", "What about teachers?" take their subject from the turns before), so two rules apply:

- lookup (`lookup_allowed`): the question must stand on its own by a conservative test (`stands_alone`): no
  follow-up marker, no ellipsis ("what about", "呢", "也", "too"), no pronoun that points back, and enough topic
  words of its own that a reader without the conversation knows what it asks. A question that fails is simply
  answered the long way.
- store (`store_allowed`): besides that, the pipeline must not have used the conversation to understand or
  answer it: not planned as a conversation follow-up, no search query with terms the question does not hold
  (a rewrite from the history), and no model that read the history while writing the answer.

Every rule errs towards a miss: a missed hit costs one normal answer, a false one hands one conversation's answer
to another person.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from rag.rules.followup import is_followup
from rag.rules.terms import content_phrases, query_terms
from rag.state import Turn
from rag.text.tokenize import normalize

CONVERSATION_FOLLOWUP = "conversation_followup"  # the planner's intent for a question about the conversation

# Ellipsis: the question names a new subject (or a condition) and borrows the rest from the turn before.
_ELLIPSIS_RE = re.compile(
    r"呢|的話|的话|也|另外|另一|其他|其它|別的|别的|同樣|同样|一樣|一样|相同|至於|至于|"
    r"他|她|這|这|那|"
    r"^\s*(?:和|跟|或|或是|或者|還是|还是|而|但|可是|但是|不過|不过|若|對了|对了)|"
    r"^\s*(?:and|or|but|also|so|then|plus|except|even|only|same|what about|how about)\b|"
    r"\b(?:too|also|as well|either|instead|else|otherwise|again|both|neither|former|latter|mentioned|other|"
    r"another|same|such)\b"
)
# A pronoun or demonstrative anywhere (is_followup only looks in short English questions).
_EN_REFERENCE_RE = re.compile(
    r"\b(?:it|its|that|this|those|these|them|they|their|theirs|there|he|him|his|she|her|hers|one|ones|here)\b"
)
_EN_EXPLETIVE_RE = re.compile(r"\bis it (?:possible|ok|okay|necessary|required|free|safe|true)\b")

# Words that ask about a property without naming what has it: "how much", "多久", "費用多少" need a subject.
_ZH_GENERIC_RE = re.compile(
    r"如果|假如|要是|若是|多少錢|多少钱|多少|多久|幾天|几天|幾個|几个|幾|几|費用|费用|價格|价格|價錢|价钱|收費|收费|免費|免费|"
    r"時間|时间|期限|要|有|是|會|会|能|在|可|都|就|錢|钱|辦|办|做|用|去|找|拿|到|裡|里|啦"
)
_EN_GENERIC_WORDS = frozenset(
    "much many long cost costs price prices fee fees charge time times free take takes mean means work works "
    "happen happens possible required allowed available okay ok difference different way ways about need needed "
    "get got do done make made use used go going still yet then now".split()
)
_MIN_TOPIC_WEIGHT = 4  # two English topic words, or four Chinese characters (重設密碼, 報名課程)


def has_conversation(*, history: Sequence[Turn], summary: str = "") -> bool:
    """Whether earlier turns could give the question a meaning of its own (history or a running summary)."""
    return bool(summary.strip()) or any(turn.content.strip() for turn in history)


def stands_alone(question: str) -> bool:
    """Conservative: True only when the question would mean the same to someone who saw no earlier turn."""
    if is_followup(question):
        return False
    text = normalize(question)
    if _ELLIPSIS_RE.search(text) or _EN_REFERENCE_RE.search(_EN_EXPLETIVE_RE.sub(" ", text)):
        return False
    return topic_weight(question) >= _MIN_TOPIC_WEIGHT


def topic_weight(question: str) -> int:
    """How much the question says about its subject: 2 per English topic word, 1 per Chinese character, once
    question scaffolding and property words ("how much", "多久", "費用") are left out."""
    weight = 0
    for phrase in content_phrases(question):
        if phrase.isascii():
            weight += 0 if phrase in _EN_GENERIC_WORDS or phrase.isdigit() else 2
        else:
            weight += len(_ZH_GENERIC_RE.sub("", phrase))
    return weight


def lookup_allowed(question: str, *, history: Sequence[Turn], summary: str = "") -> bool:
    """Whether the cache may be asked for (and later given) an answer to `question` in this conversation."""
    if is_followup(question):
        return False  # a follow-up marker with nothing to follow is still no question to repeat to others
    return not has_conversation(history=history, summary=summary) or stands_alone(question)


def store_allowed(
    question: str,
    *,
    history: Sequence[Turn],
    summary: str = "",
    intent: str = "",
    followup_instruction: str = "",
    queries: Iterable[str] = (),
    answer_saw_history: bool = False,
) -> bool:
    """Whether the answer just given to `question` is the one a question without a conversation would get.

    `queries` are the searches that ran; `answer_saw_history` says whether a model that reads the conversation
    wrote the answer (with an LLM, response_synth sends the recent turns and the summary).
    """
    if not lookup_allowed(question, history=history, summary=summary):
        return False
    if intent == CONVERSATION_FOLLOWUP or followup_instruction.strip():
        return False  # the planner read it as being about the conversation
    if not has_conversation(history=history, summary=summary):
        return True
    if answer_saw_history:
        return False
    own_terms = query_terms(question)
    # A search term the question does not hold came from somewhere: with a conversation, from the history.
    return all(query_terms(query) <= own_terms for query in queries)
