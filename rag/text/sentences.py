"""Where an English full stop does not end a sentence: after an abbreviation ("ext. 88100", "Dr. Lin", "e.g. the
app", "No. 5", "9 a.m. Monday") or an initial ("J. Smith"). Numbers ("3.5 GB", "v2.0") never reach here: a stop
ends a sentence only when white space follows it. Both sentence splitters (the chunker's and the answer's) ask
this, so a phone extension is never cut from its number, in a chunk or in an answer ("ext [1]. 88100").
"""

from __future__ import annotations

import re

# Lower case, without the final stop. Left out on purpose: words that end sentences as often as they shorten
# ("etc.", "Inc.", "min."): a sentence cut after them still reads whole.
ABBREVIATIONS = frozenset(
    "e.g i.e eg ie cf vs approx ca ext tel fax no nos nr dr mr mrs ms prof st jr sr fig figs vol p pp dept "
    "a.m p.m ph.d u.s mt art para".split()
)
# the word before a stop: letters, with inner stops ("e.g", "a.m", "Ph.D")
_WORD_BEFORE_RE = re.compile(r"([A-Za-z]+(?:\.[A-Za-z]+)*)$")


def stop_ends_sentence(text: str, stop: int) -> bool:
    """Whether the "." at index `stop` of `text` ends a sentence (white space after it is the caller's test)."""
    match = _WORD_BEFORE_RE.search(text, 0, stop)
    if match is None:
        return True
    word = match.group(1)
    if word.lower() in ABBREVIATIONS:
        return False
    # a lone capital is an initial ("J. Smith"); a lone lower-case letter after a space is a list mark's or a unit's
    return not (len(word) == 1 and word.isupper())


def ends_with_abbreviation(text: str) -> bool:
    """ "..., e.g.", "Dr.": text whose final stop belongs to its last word, so it must stay when a citation is
    put in front of the closing punctuation."""
    stripped = text.rstrip()
    if not stripped.endswith("."):
        return False
    match = _WORD_BEFORE_RE.search(stripped, 0, len(stripped) - 1)
    return match is not None and match.group(1).lower() in ABBREVIATIONS | {"etc"}
