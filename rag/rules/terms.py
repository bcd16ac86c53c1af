"""Key terms of a question and lexical overlap with a passage, for query variants, relevance and extraction.

Chinese questions are wrapped in function words (請問、如何、怎麼、嗎) that every passage shares, so they are cut
out before comparing; what is left is matched as character bigrams, the unit our lexical index uses too.
English words are compared by their first five letters, a crude stem that makes reset/resetting,
account/accounts and enrol/enrolment meet without a stemmer dependency.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rag.text.question_words import ZH_QUESTION_WORDS_RE as _ZH_FUNCTION_RE
from rag.text.sentences import stop_ends_sentence
from rag.text.tokenize import EN_STOPWORDS, normalize, tokenize

_CJK_RUN_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_LATIN_WORD_RE = re.compile(r"[a-z0-9]+(?:[._'-][a-z0-9]+)*")
_STEM_LEN = 5

# Words that ask rather than say, on top of the tokenizer's stopwords.
_EN_QUESTION_WORDS = EN_STOPWORDS | frozenset(
    "please help get got need want know tell about any some there way ways possible would should could "
    "have has had was were am been being into out up".split()
)


def stem(word: str) -> str:
    return word[:_STEM_LEN]


def strip_question_words(text: str) -> str:
    """The question without Chinese question scaffolding and punctuation ("如何重設密碼？" -> "重設密碼")."""
    text = _ZH_FUNCTION_RE.sub(" ", normalize(text))
    return " ".join(_CJK_RUN_RE.findall(text) + [w for w in _LATIN_WORD_RE.findall(text)]) if text else ""


def content_phrases(text: str) -> list[str]:
    """Content-bearing pieces in order, without repeats: Chinese runs between function words, English words
    that are not stopwords ("How do I reset my password?" -> ["reset", "password"])."""
    text = _ZH_FUNCTION_RE.sub(" ", normalize(text))
    seen: dict[str, None] = {}
    for match in re.finditer(rf"{_CJK_RUN_RE.pattern}|{_LATIN_WORD_RE.pattern}", text):
        piece = match.group()
        if piece not in _EN_QUESTION_WORDS:
            seen.setdefault(piece, None)
    return list(seen)


def phrase_terms(phrases: Iterable[str]) -> set[str]:
    """Comparable terms of content phrases: bigrams of Chinese runs (a lone character as itself), stems."""
    terms: set[str] = set()
    for phrase in phrases:
        if _CJK_RUN_RE.fullmatch(phrase):
            if len(phrase) == 1:
                terms.add(phrase)
            else:
                terms.update(phrase[i : i + 2] for i in range(len(phrase) - 1))
        else:
            terms.add(stem(phrase))
    return terms


def query_terms(text: str) -> set[str]:
    return phrase_terms(content_phrases(text))


def query_characters(text: str) -> set[str]:
    """The Chinese characters of the question's content phrases: a paraphrase ("去掉頭" for "省去字頭") keeps
    most of them while it breaks the bigrams."""
    return {char for phrase in content_phrases(text) if _CJK_RUN_RE.fullmatch(phrase) for char in phrase}


def text_terms(text: str) -> set[str]:
    """Every comparable term of a passage: Chinese unigrams and bigrams, stemmed words."""
    # The tokenizer's Latin tokens are [a-z0-9] only, so "is ASCII" tells them from CJK ones, and cheaply.
    return {token[:_STEM_LEN] if token.isascii() else token for token in tokenize(text)}


def overlap(terms: set[str], passage_terms: set[str]) -> float:
    """Share of `terms` found in the passage; 1.0 when there is nothing to look for."""
    if not terms:
        return 1.0
    return len(terms & passage_terms) / len(terms)


def best_coverage(question: str, passages: Iterable[str]) -> float:
    """The largest share of the question's own terms one of `passages` holds, a Chinese question's being read
    as its bigrams and as its characters (a paraphrase breaks the bigrams but keeps most characters), whichever
    is found more; 0.0 without passages, 1.0 when the question has nothing to look for."""
    wanted = [terms for terms in (query_terms(question), query_characters(question)) if terms]
    if not wanted:
        return 1.0
    return max((overlap(terms, text_terms(passage)) for passage in passages for terms in wanted), default=0.0)


_MD_LIST_RE = re.compile(r"^\s*(?:[-*+]|\d+[.)、])\s+")
_MD_INLINE_RE = re.compile(r"\*\*|__|`")
# "**Label.** text" or "**Label**: text"; not "**a whole clause**，text" (a comma goes on with the sentence)
_BOLD_LABEL_RE = re.compile(r"^\*\*([^*]{1,60}?)([.。:：]?)\*\*([.。:：]?)\s*(?=[^\s，,、；;])")
_MD_LINK_RE = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_TABLE_RULE_RE = re.compile(r"^\s*\|?\s*:?-{3,}")
_SENTENCE_END_RE = re.compile(r"(?<=[。！？!?；])|(?<=[.])\s+(?=[A-Z0-9\"'(“])")


def split_sentences(text: str, *, min_chars: int = 6) -> list[str]:
    """Plain sentences of a Markdown passage, in order; headings, table rules and fragments are dropped."""
    sentences: list[str] = []
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line or line.startswith("#") or line.startswith("---") or _TABLE_RULE_RE.match(line):
            continue
        if line.startswith("|"):
            line = "；".join(cell.strip() for cell in line.strip("|").split("|") if cell.strip())
        line = _MD_LIST_RE.sub("", line)
        # "**Reset your password.** Select Forgot password..." is a label and its sentence: keep them together.
        line = _BOLD_LABEL_RE.sub(_label_colon, line)
        line = _MD_LINK_RE.sub(r"\1 (\2)", line)
        line = _MD_INLINE_RE.sub("", line).strip()
        for piece in _sentence_pieces(line):
            piece = piece.strip()
            if len(piece) >= min_chars:
                sentences.append(piece)
    return sentences


def _sentence_pieces(line: str) -> list[str]:
    """The line cut at its sentence ends; not after an abbreviation's stop ("ext. 88100", "Dr. Lin")."""
    pieces: list[str] = []
    start = 0
    for match in _SENTENCE_END_RE.finditer(line):
        if match.end() > match.start() and not stop_ends_sentence(line, match.start() - 1):
            continue  # white space after a stop that shortens a word
        pieces.append(line[start : match.start()])
        start = match.end()
    pieces.append(line[start:])
    return pieces


def _label_colon(match: re.Match[str]) -> str:
    label, punct = match.group(1), match.group(2) or match.group(3)
    if punct in (".", "。") and _is_clause(label):
        return f"{label}{punct} "  # a sentence set in bold ("**IE is not supported.** Ask IT..."), not a label
    return f"{label}：" if _CJK_RUN_RE.search(label) else f"{label}: "


def _is_clause(label: str) -> bool:
    """Bold text long enough to say something ("Internet Explorer is not supported") rather than name a step
    ("Reset your password")."""
    return len(label.split()) > 4 or (len(label) > 12 and _CJK_RUN_RE.search(label) is not None)
