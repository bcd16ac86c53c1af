"""Dense embeddings: the protocol the store and retriever use, and an offline lexical embedder.

`LexicalEmbedder` needs no weights and no network, so a fresh checkout indexes and answers at once: text becomes a
signed, hashed bag of character n-grams (CJK) and words plus character trigrams (Latin), sublinear TF, L2-normalised.
It is a weak "dense" signal (no synonyms), kept so the whole dense path is exercised until a real model is
configured. Hashing is fixed arithmetic (crc32 for Latin features, a splitmix64 mix of packed code points for CJK
n-grams, vectorised with numpy), never `hash()`, whose per-process seed would change every vector on restart.

Other embedders: `OpenAIEmbedder` (rag.llm.embedder, an OpenAI-compatible `/v1/embeddings` server; async methods
besides the sync ones) and `SentenceTransformerEmbedder` (rag.retrieval.st_embedder, a local model folder).
rag.wiring.build_embedder picks one from the settings. The helpers below let callers treat them alike.
"""

from __future__ import annotations

import asyncio
import re
import threading
import zlib
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from rag.text.tokenize import normalize

_LATIN_RE = re.compile(r"[a-z0-9]+(?:[._'-][a-z0-9]+)*")
# the same ranges as rag.text.tokenize: CJK ideographs (+ ext. A, compatibility), kana, hangul
_CJK_RANGES = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x3040, 0x30FF), (0xAC00, 0xD7AF))
_NGRAM_SALT = 0x9E3779B97F4A7C15  # xor-ed with n, keeps a 1-gram and a 2-gram with equal packed codes apart
_U64 = np.uint64
_MAX_FEATURES = 500_000


def _runs(keys: np.ndarray, owners: np.ndarray, *, key_bits: int = 64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (owner, key) pairs, sorted by owner then key, with how often each occurs. Keys of at most
    `key_bits` bits, with owners that fit above them, are sorted packed in one integer (much faster than lexsort)."""
    if key_bits + int(owners.max(initial=0)).bit_length() <= 64:
        packed = np.sort((owners.astype(np.uint64) << _U64(key_bits)) | keys)
        keys, owners = packed & _U64((1 << key_bits) - 1), (packed >> _U64(key_bits)).astype(owners.dtype)
    else:
        order = np.lexsort((keys, owners))
        keys, owners = keys[order], owners[order]
    starts = np.flatnonzero(np.r_[True, (keys[1:] != keys[:-1]) | (owners[1:] != owners[:-1])])
    counts = np.diff(np.r_[starts, len(keys)])
    return keys[starts], owners[starts], counts


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a fixed bijection on uint64 that spreads packed code points over all bits."""
    x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


@runtime_checkable
class Embedder(Protocol):
    """Sync and CPU- or network-bound: async callers use `aembed_query` below (a thread unless it is async)."""

    @property
    def name(self) -> str:
        """Identifies the vector space; stored with an index so a query never uses another space."""
        ...

    @property
    def dim(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]: ...

    def embed_query(self, text: str) -> list[float]: ...


@runtime_checkable
class AsyncEmbedder(Embedder, Protocol):
    """A network embedder: awaited on the event loop, so no thread is held for a round trip."""

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]: ...

    async def aembed_query(self, text: str) -> list[float]: ...


LEXICAL, OPENAI, SENTENCE_TRANSFORMERS = "lexical", "openai", "sentence-transformers"
EMBEDDER_KINDS = (LEXICAL, OPENAI, SENTENCE_TRANSFORMERS)
DEFAULT_INDEX_BATCH = 128


def embedder_kind(embedder: Embedder) -> str:
    """lexical, openai or sentence-transformers (an embedder's `kind`; anything without one counts as lexical:
    test doubles wrap the lexical embedder)."""
    kind = getattr(embedder, "kind", LEXICAL)
    return kind if kind in EMBEDDER_KINDS else LEXICAL


def index_batch_size(embedder: Embedder, default: int = DEFAULT_INDEX_BATCH) -> int:
    """Texts the indexer embeds per call (a progress step each): the embedder's `batch_size` when it has one."""
    size = getattr(embedder, "batch_size", None)
    return size if isinstance(size, int) and size > 0 else default


async def aembed_query(embedder: Embedder, text: str) -> list[float]:
    """A query vector without blocking the loop: awaited for a network embedder, on a thread otherwise."""
    if isinstance(embedder, AsyncEmbedder):
        return await embedder.aembed_query(text)
    return await asyncio.to_thread(embedder.embed_query, text)


def bind_embedder_loop(embedder: Embedder, loop: asyncio.AbstractEventLoop | None) -> None:
    """Make a network embedder's sync calls (from worker threads) run on `loop`; nothing for the others."""
    bind = getattr(embedder, "bind_loop", None)
    if callable(bind):
        bind(loop)


class LexicalEmbedder:
    """Hashed n-gram vectors. Deterministic across processes and machines for the same parameters."""

    kind = LEXICAL

    def __init__(
        self,
        dim: int = 1024,
        *,
        cjk_ngrams: tuple[int, ...] = (1, 2, 3),
        cjk_weights: tuple[float, ...] = (0.5, 1.0, 1.0),
        word_weight: float = 1.0,
        trigram_weight: float = 0.5,
    ) -> None:
        if dim < 8:
            raise ValueError("dim must be >= 8")
        if len(cjk_weights) != len(cjk_ngrams) or not all(1 <= n <= 3 for n in cjk_ngrams):
            raise ValueError("one weight per CJK n-gram size, sizes 1 to 3")
        self._dim = dim
        self._ngrams = tuple(zip(cjk_ngrams, cjk_weights, strict=True))
        self._word_weight = word_weight
        self._trigram_weight = trigram_weight
        # Latin features interned as ids (bucket and signed weight by id), and each word's feature ids (its word
        # feature, then its trigrams): a text's features are then one concatenation and one np.unique, not a Python
        # loop over a few hundred strings. Bounded so a long-running server does not grow without end; the lock
        # keeps a thread's ids valid while another thread adds features or starts the tables afresh.
        self._lock = threading.Lock()
        self._reset_features()

    @property
    def name(self) -> str:
        grams = ",".join(f"{n}:{w:g}" for n, w in self._ngrams)
        return f"lexical-v2-d{self._dim}-cjk{grams}-w{self._word_weight:g}-t{self._trigram_weight:g}"

    @property
    def dim(self) -> int:
        return self._dim

    def _reset_features(self) -> None:
        self._feature_ids: dict[str, int] = {}
        self._buckets = np.zeros(4096, dtype=np.int64)
        self._weights = np.zeros(4096, dtype=np.float64)
        self._words: dict[str, np.ndarray] = {}

    def _feature_id(self, feature: str) -> int:
        found = self._feature_ids.get(feature)
        if found is None:
            found = len(self._feature_ids)
            if found == len(self._buckets):
                self._buckets = np.concatenate([self._buckets, np.zeros_like(self._buckets)])
                self._weights = np.concatenate([self._weights, np.zeros_like(self._weights)])
            digest = zlib.crc32(feature.encode("utf-8"))
            weight = self._word_weight if feature[0] == "w" else self._trigram_weight
            # the top bit picks the sign, so collisions cancel out on average instead of piling up
            self._buckets[found] = digest % self._dim
            self._weights[found] = -weight if digest & 0x80000000 else weight
            self._feature_ids[feature] = found
        return found

    def _word_features(self, word: str) -> np.ndarray:
        ids = self._words.get(word)
        if ids is None:
            features = [f"w:{word}"]
            if self._trigram_weight and not word.isdigit() and len(word) > 3:
                # trigrams of "<word>" let "enrol" and "enrolment" share most of their features
                padded = f"<{word}>"
                features += [f"t:{padded[i : i + 3]}" for i in range(len(padded) - 2)]
            ids = np.array([self._feature_id(feature) for feature in features], dtype=np.int64)
            self._words[word] = ids
        return ids

    def _add_cjk(self, flat: np.ndarray, texts: Sequence[str]) -> None:
        """CJK n-grams of every text at once, vectorised: an n-gram is its code points (21 bits each) packed into
        one integer, mixed. `flat` is the output matrix as one row after another."""
        # each text followed by a NUL, which is not CJK, so no n-gram spans two texts
        points = np.frombuffer("\0".join([*texts, ""]).encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
        rows = np.repeat(np.arange(len(texts), dtype=np.int64), [len(text) + 1 for text in texts])
        cjk = np.zeros(len(points), dtype=bool)
        for low, high in _CJK_RANGES:
            cjk |= (points >= low) & (points <= high)
        for n, weight in self._ngrams:
            width = len(points) - n + 1
            valid = cjk[:width].copy()
            key = points[:width].copy()
            for offset in range(1, n):
                valid &= cjk[offset : width + offset]
                key = (key << _U64(21)) | points[offset : width + offset]
            if not valid.any():
                continue
            keys, owners, counts = _runs(key[valid], rows[:width][valid], key_bits=21 * n)
            mixed = _mix(keys ^ _U64(_NGRAM_SALT ^ n))
            buckets = (mixed % _U64(self._dim)).astype(np.int64)
            signs = np.where((mixed >> _U64(63)) == 1, -1.0, 1.0)
            # per text, its n-grams in key order: the order (and so the float32 sums) of one np.unique per text
            values = (signs * weight * (1.0 + np.log(counts))).astype(np.float32)
            np.add.at(flat, owners * self._dim + buckets, values)

    def _add_latin(self, flat: np.ndarray, texts: Sequence[str]) -> None:
        """Words and trigrams of every text at once: each (text, feature) pair's 1 + log tf, added in the order
        of the feature's first occurrence in its text."""
        with self._lock:
            if len(self._feature_ids) > _MAX_FEATURES:
                self._reset_features()
            words = [_LATIN_RE.findall(text) for text in texts]
            every = [word for found in words for word in found]
            # known words looked up in C; the few new ones get their features first
            for word in set(every).difference(self._words):
                self._word_features(word)
            per_word = list(map(self._words.__getitem__, every))
            buckets, weights = self._buckets, self._weights
            features = len(self._feature_ids)
        if not per_word:
            return
        word_rows = np.repeat(np.arange(len(texts), dtype=np.int64), [len(found) for found in words])
        ids = np.concatenate(per_word)
        rows = np.repeat(word_rows, np.fromiter(map(len, per_word), dtype=np.int64, count=len(per_word)))
        pairs, first, counts = np.unique(rows * features + ids, return_index=True, return_counts=True)
        order = np.argsort(first, kind="stable")
        pairs, counts = pairs[order], counts[order]
        owners, feature = np.divmod(pairs, features)
        values = (weights[feature] * (1.0 + np.log(counts))).astype(np.float32)
        np.add.at(flat, owners * self._dim + buckets[feature], values)

    def encode(self, texts: Sequence[str], *, normalized: bool = False) -> np.ndarray:
        """float32 matrix (len(texts), dim), rows L2-normalised (an empty text gives a zero row). `normalized`:
        the texts are `rag.text.tokenize.normalize`'s already (the indexer's, shared with BM25)."""
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        if not texts:
            return out
        normalized_texts = texts if normalized else [normalize(text) for text in texts]
        flat = out.reshape(-1)
        # uint64 multiplication wraps by design in the mix
        with np.errstate(over="ignore"):
            self._add_cjk(flat, normalized_texts)
            self._add_latin(flat, normalized_texts)
        # each row's norm as np.linalg.norm computes it for a vector (sqrt of its dot product with itself), then
        # every row divided at once: the same float32 operations as row by row
        norms = np.array([np.sqrt(vector.dot(vector)) for vector in out], dtype=np.float32)
        np.divide(out, norms[:, None], out=out, where=norms[:, None] > 0)
        return out

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.encode(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.encode([text])[0].tolist()
