"""BM25 term counts of many texts at once: the tokens of `rag.text.tokenize.token_bag` as ids, vectorised.

The tokenizer (CJK unigrams and bigrams, Latin words without English stop words, one token where a CJK run
touches a Latin word) takes a Python step per token, some 400 per chunk. Here a batch of texts becomes one array
of code points: CJK unigrams and bigrams are slices of it, their ids the crc32 of their UTF-8 bytes computed
over whole arrays (every CJK character of the tokenizer's ranges is three bytes in UTF-8); Latin words are one
`findall` over the batch, looked up in the token-id cache in C; the word spans, found with the same arrays, give
the joins. Each text's distinct ids and their counts then come from one sort. The tokens are the tokenizer's,
token for token (tests compare the two on mixed Chinese and English text), so the BM25 weights are the same.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from rag.text.tokenize import CJK_RANGES, EN_STOPWORDS, LATIN_WORD, normalize

_WORD_RE = re.compile(LATIN_WORD)
_SEPARATORS = np.array([ord(c) for c in "._'-"], dtype=np.uint32)
# Token ids are crc32 masked to 31 bits (`rag.retrieval.sparse.token_id`): stable across processes and small
# enough for any sparse index, and room above them for a text's number in one int64 (see `_bags`).
TOKEN_ID_BITS = 31
TOKEN_ID_MASK = (1 << TOKEN_ID_BITS) - 1
_T = TypeVar("_T")


def _crc_table() -> np.ndarray:
    """zlib's crc32 table (reflected polynomial 0xEDB88320), one entry per byte value."""
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> np.uint32(1)) ^ np.uint32(0xEDB88320), table >> np.uint32(1))
    return table.astype(np.uint32)


_CRC_TABLE = _crc_table()


def utf8_crc32(*characters: np.ndarray) -> np.ndarray:
    """`zlib.crc32` of the UTF-8 of the strings made of one code point from each array (all in U+0800-U+FFFF,
    three bytes each), element by element, masked to 31 bits like the token ids."""
    crc = np.full(len(characters[0]), 0xFFFFFFFF, dtype=np.uint32)
    for points in characters:
        for byte in ((points >> 12) | 0xE0, ((points >> 6) & 0x3F) | 0x80, (points & 0x3F) | 0x80):
            crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> np.uint32(8))
    return (crc ^ np.uint32(0xFFFFFFFF)).astype(np.int64) & TOKEN_ID_MASK


@dataclass(frozen=True, slots=True)
class TermBags:
    """Each text's distinct token ids, sorted, with how often each occurs: text i's are
    ``ids[offsets[i]:offsets[i + 1]]`` and ``counts[...]`` alike."""

    ids: np.ndarray  # int64
    counts: np.ndarray  # int64
    offsets: np.ndarray  # int64, len(texts) + 1

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per text (BM25's document length)."""
        running = np.concatenate([[0], np.cumsum(self.counts)])
        return running[self.offsets[1:]] - running[self.offsets[:-1]]

    @property
    def owners(self) -> np.ndarray:
        """The text each id belongs to."""
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.offsets))

    @classmethod
    def concatenate(cls, parts: Sequence[TermBags]) -> TermBags:
        if not parts:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(1, np.int64))
        shifts = np.cumsum([0, *(len(part.ids) for part in parts[:-1])])
        offsets = [parts[0].offsets[:1], *(part.offsets[1:] + shift for part, shift in zip(parts, shifts, strict=True))]
        return cls(
            np.concatenate([part.ids for part in parts]),
            np.concatenate([part.counts for part in parts]),
            np.concatenate(offsets),
        )


def _in_ranges(points: np.ndarray, ranges: Sequence[tuple[int, int]]) -> np.ndarray:
    found = np.zeros(len(points), dtype=bool)
    for low, high in ranges:
        found |= (points >= low) & (points <= high)
    return found


def term_bags(texts: Sequence[str], ids_of: WordIds, *, normalized: bool = False) -> TermBags:
    """The distinct token ids of each text and their counts (`token_bag(text, bigrams=True,
    drop_stopwords=True, joins=True)`, each token's id as `ids_of` gives it for Latin words and joins).
    `normalized`: the texts are `normalize`'s already."""
    normalized_texts = texts if normalized else [normalize(text) for text in texts]
    # one newline after each text: neither CJK nor part of a word, so no token spans two texts
    joined = "\n".join([*normalized_texts, ""])
    points = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    rows = np.repeat(np.arange(len(texts), dtype=np.int64), [len(text) + 1 for text in normalized_texts])
    cjk = _in_ranges(points, CJK_RANGES)
    pair = cjk[:-1] & cjk[1:]
    owners = [rows[cjk], rows[:-1][pair]]
    ids = [utf8_crc32(points[cjk]), utf8_crc32(points[:-1][pair], points[1:][pair])]
    words = _WORD_RE.findall(joined)
    if words:
        starts, ends = _word_spans(points, len(words))
        kept = np.fromiter(map(EN_STOPWORDS.__contains__, words), dtype=bool, count=len(words))
        kept = ~kept
        owners.append(rows[starts][kept])
        ids.append(ids_of.ids(words)[kept])
        joins, join_rows = _joins(points, cjk, words, starts, ends, rows)
        if joins:
            owners.append(join_rows)
            ids.append(ids_of.ids(joins))
    return _bags(np.concatenate(owners), np.concatenate(ids), len(texts))


def _word_spans(points: np.ndarray, expected: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each Latin word starts and ends (exclusive), in `findall` order: a word is a run of [a-z0-9] and of
    the separators ._'- that have one of those on both sides."""
    alnum = ((points >= ord("a")) & (points <= ord("z"))) | ((points >= ord("0")) & (points <= ord("9")))
    inner = np.zeros(len(points), dtype=bool)
    inner[1:-1] = np.isin(points[1:-1], _SEPARATORS) & alnum[:-2] & alnum[2:]
    word = alnum | inner
    edges = np.diff(word.astype(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if len(starts) != expected:  # the arrays disagree with the regular expression: a bug, never a guess
        raise RuntimeError(f"found {len(starts)} word spans for {expected} words")
    return starts, ends


def _joins(
    points: np.ndarray, cjk: np.ndarray, words: list[str], starts: np.ndarray, ends: np.ndarray, rows: np.ndarray
) -> tuple[list[str], np.ndarray]:
    """The tokens where a CJK character touches a word: the character before a word with it, and a word with
    the character after it."""
    before = np.flatnonzero((starts > 0) & cjk[np.maximum(starts - 1, 0)])
    after = np.flatnonzero((ends < len(points)) & cjk[np.minimum(ends, len(points) - 1)])
    if not len(before) and not len(after):
        return [], np.zeros(0, dtype=np.int64)
    tokens = [chr(points[starts[i] - 1]) + words[i] for i in before.tolist()]
    tokens += [words[i] + chr(points[ends[i]]) for i in after.tolist()]
    return tokens, np.concatenate([rows[starts[before]], rows[starts[after]]])


def _bags(owners: np.ndarray, ids: np.ndarray, texts: int) -> TermBags:
    keys, counts = np.unique((owners << TOKEN_ID_BITS) | ids, return_counts=True)
    offsets = np.searchsorted(keys >> TOKEN_ID_BITS, np.arange(texts + 1, dtype=np.int64))
    return TermBags(keys & TOKEN_ID_MASK, counts.astype(np.int64), offsets.astype(np.int64))


class WordIds:
    """Token ids of strings, looked up in a cache the new ones are added to first (`rag.retrieval.sparse`'s)."""

    def __init__(self, cache: dict[str, int], make: Callable[[str], int]) -> None:
        self._cache = cache
        self._make = make

    def ids(self, tokens: list[str]) -> np.ndarray:
        """Each token's id, in order."""
        return self._looked_up(tokens, lambda found: np.fromiter(found, dtype=np.int64, count=len(tokens)))

    def counts(self, tokens: list[str]) -> Counter[int]:
        """How often each token's id occurs."""
        return self._looked_up(tokens, Counter)

    def _looked_up(self, tokens: list[str], collect: Callable[[Iterator[int]], _T]) -> _T:
        """`collect` of the tokens' ids, looked up in C once the tokens not seen before have theirs."""
        for token in set(tokens).difference(self._cache):
            self._make(token)
        try:
            return collect(map(self._cache.__getitem__, tokens))
        except KeyError:  # another thread started the cache afresh meanwhile
            return collect(map(self._make, tokens))
