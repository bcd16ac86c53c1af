"""Does a question lean on the conversation, and does it ask to transform the previous answer?

Two uses: the semantic cache only stores context-free questions (a wrong "not a follow-up" would serve one
user's context to another, so the markers err towards "follow-up"), and the planner sends transform requests
("shorter", "用英文") to `followup_transform` instead of the retriever.
"""

from __future__ import annotations

import re

from rag.rules.terms import content_phrases
from rag.text.tokenize import normalize

# Instructions a transform of the previous answer can carry out.
SUMMARIZE = "summarize"
SHORTEN = "shorten"
ELABORATE = "elaborate"
TRANSLATE_EN = "translate:en"
TRANSLATE_ZH_HANT = "translate:zh-hant"
TRANSLATE_ZH_HANS = "translate:zh-hans"
TRANSLATE_OTHER = "translate"  # "translate it" without a target: into the language the answer is not in

# Words that only make sense against something said before, whatever the question's length.
_STRONG_MARKERS_RE = re.compile(
    r"它|這個|这个|那個|那个|這些|这些|那些|這樣|这样|那樣|那样|上面|上述|以上|剛剛|刚刚|剛才|刚才|前面|你說|你说|"
    r"你剛|你刚|同上|翻譯|翻译|英文版|中文版|簡短|简短|精簡|精简|短一點|短一点|總結|总结|摘要|重點|重点|詳細一點|详细一点|"
    r"再說|再说|多說|多说|"
    r"\b(?:above|previous|earlier|translate|translation|shorter|shorten|summari[sz]e|summary|tl;?dr|elaborate|"
    r"rephrase|simplify|you said|your (?:last |previous )?answer|more detail|more details|tell me more|"
    r"explain more|same)\b"
)
# "那要多久？" (then how long?) opens with 那 when it refers back; inside a word (刹那) it does not.
_ZH_LEADING_THEN_RE = re.compile(r"^\s*(?:那|那麼|那么|所以|然後|然后|還有|还有|另外)(?!些|個|个|樣|样)")
# English pronouns are anaphoric in short questions ("how long does it take?"); a long question that uses
# "it"/"that" usually says what it means ("is it possible to change the email that I registered with?").
_EN_PRONOUN_RE = re.compile(r"\b(?:it|its|that|this|those|these|them|they|there|one)\b")
_EN_EXPLETIVE_RE = re.compile(r"\bis it (?:possible|ok|okay|necessary|required|free|safe|true)\b")
_SHORT_EN_WORDS = 8
_EN_BARE_ASK_RE = re.compile(r"^\s*(?:and |so |then )?(?:how (?:long|many|much|often|soon)|what about|and what)\b")
_WORD_RE = re.compile(r"[a-z0-9']+")

# Transform requests are short imperatives; a long question that happens to contain "summary" is a question.
_MAX_INSTRUCTION_CHARS_ZH = 24
_MAX_INSTRUCTION_WORDS_EN = 14
_INSTRUCTIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        TRANSLATE_ZH_HANS,
        re.compile(r"簡體|简体|簡中|简中|\bsimplified chinese\b|\bin simplified\b"),
    ),
    (
        TRANSLATE_EN,
        re.compile(r"英文|英語|英语|\b(?:in|into|to) english\b|\benglish (?:please|version)\b|^\s*english\??\s*$"),
    ),
    (
        TRANSLATE_ZH_HANT,
        re.compile(
            r"繁體|繁体|用中文|中文版|翻成中文|翻譯成中文|翻译成中文|\b(?:in|into|to) (?:traditional )?chinese\b|"
            r"\b(?:in|into|to) mandarin\b|\bchinese (?:please|version)\b"
        ),
    ),
    (TRANSLATE_OTHER, re.compile(r"翻譯|翻译|\btranslate\b|\btranslation\b")),
    (
        SUMMARIZE,
        re.compile(r"總結|总结|摘要|重點|重点|歸納|归纳|\bsummari[sz]e\b|\bsummary\b|\btl;?dr\b|\bkey points\b"),
    ),
    (
        SHORTEN,
        re.compile(
            r"簡短|简短|精簡|精简|短一點|短一点|簡單一點|简单一点|長話短說|长话短说|\bshorter\b|\bshorten\b|"
            r"\bbriefly\b|\bbrief\b|\bconcise\b|\bin short\b|\bsimpler\b|\bsimplify\b"
        ),
    ),
    (
        ELABORATE,
        re.compile(
            r"詳細|详细|多說|多说|再說|再说|說明更多|更多細節|更多细节|展開|展开|\belaborate\b|\bmore detail|"
            r"\badd details?\b|"
            r"\btell me more\b|\bexplain more\b|\bexplain (?:it|that|this) (?:again|further|in detail)\b|\bexpand\b"
        ),
    ),
)


# What may surround an instruction without making it a new question ("可以用英文回答嗎", "translate the above").
_FILLER_RE = re.compile(
    r"回答|回覆|回复|說明|说明|解釋|解释|一點|一点|一下|版本|中文|內容|内容|上面|剛剛|刚刚|這個|这个|那個|那个|"
    r"說|说|講|讲|寫|写|成|用|再|它|請|请|幫|帮|給|给|"
    r"\b(?:answer|reply|respond|response|version|text|again|above|previous|that|this|it|please|the|in|into|to|me|"
    r"language|translate|translation|can|could|would|you|make|do|say|explain|a|bit|little|more)\b"
)
_MAX_RESIDUAL_WEIGHT = 2


def is_followup(question: str) -> bool:
    """True when the question may depend on earlier turns (so it must not be cached or answered blind)."""
    text = normalize(question)
    if _STRONG_MARKERS_RE.search(text) or _ZH_LEADING_THEN_RE.search(text) or transform_instruction(question):
        return True
    words = _WORD_RE.findall(text)
    if not words or len(words) > _SHORT_EN_WORDS:
        return False
    return bool(_EN_PRONOUN_RE.search(text)) and not _EN_EXPLETIVE_RE.search(text)


def leans_on_context(question: str) -> bool:
    """Whether a search for the question should also carry the previous question's topic: a follow-up, or a
    short English question that names what it asks ("how long", "what about") and at most one other word
    ("How long do I have to confirm?"). Asked with no conversation, such a question is still its own (cacheable)."""
    if is_followup(question):
        return True
    text = normalize(question)
    if not _EN_BARE_ASK_RE.match(text) or len(_WORD_RE.findall(text)) > _SHORT_EN_WORDS:
        return False
    return len([p for p in content_phrases(_EN_BARE_ASK_RE.sub(" ", text)) if p.isascii()]) <= 1


def transform_instruction(question: str) -> str:
    """The transform a short follow-up asks for (SUMMARIZE, TRANSLATE_EN, ...), or "" for none."""
    text = normalize(question).strip()
    words = _WORD_RE.findall(text)
    if len(text) > _MAX_INSTRUCTION_CHARS_ZH * 4 or len(words) > _MAX_INSTRUCTION_WORDS_EN:
        return ""
    cjk_chars = len(text) - sum(len(w) for w in words)
    if cjk_chars > _MAX_INSTRUCTION_CHARS_ZH and not words:
        return ""
    for instruction, pattern in _INSTRUCTIONS:
        match = pattern.search(text)
        if match is None:
            continue
        # "報名的詳細流程是什麼" mentions 詳細 but asks something new: only a little filler may remain.
        residual = _FILLER_RE.sub(" ", text[: match.start()] + " " + text[match.end() :])
        weight = sum(2 if piece.isascii() else len(piece) for piece in content_phrases(residual))
        return instruction if weight <= _MAX_RESIDUAL_WEIGHT else ""
    return ""
