"""Writing a build's points: each item's BM25 vector made for the whole build at once, its dense vector per batch,
and the points written to the store a thousand at a time, with progress and cancellation between batches. Used by
`rag.retrieval.indexer` (full and incremental builds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from rag.retrieval.embedding import Embedder, LexicalEmbedder
from rag.retrieval.sparse import BM25Encoder, SparseVector
from rag.retrieval.store import StorePoint, VectorStore
from rag.text.tokenize import normalize

Progress = Callable[[int, int], None]
WRITE_POINTS = 1000  # points per store write (the database writes them in one transaction)


class IndexCancelled(Exception):
    """The build was stopped on request before its switch; it was dropped and the live index is untouched."""


@dataclass(frozen=True, slots=True)
class BuildItem:
    """One point a build embeds: its id, payload and the text its vectors are made from."""

    point_id: str
    payload: dict[str, Any]
    text: str

    @property
    def language(self) -> str:
        return str(self.payload.get("language", ""))


class SparseSide:
    """The BM25 vectors of a build's items, made for all of them at once (`BM25Encoder.term_bags`), handed out
    batch by batch."""

    def __init__(self, encoder: BM25Encoder, items: Sequence[BuildItem]) -> None:
        self.encoder = encoder
        # normalised once, for BM25 and for the offline embedder (`embed_batch`), which would each do it again
        self.normalized = [normalize(item.text) for item in items]
        self.bags = encoder.term_bags([item.text for item in items], normalized=self.normalized)
        self.languages = [item.language for item in items]
        self._weights = np.zeros(0)

    def average(self) -> float:
        """`BM25Encoder.average_length` of every item."""
        return int(self.bags.lengths.sum()) / len(self.bags) if len(self.bags) else 0.0

    def averages(self) -> dict[str, float]:
        # length normalisation per language: a CJK chunk has about twice as many tokens (unigrams + bigrams) as an
        # English one of the same size, and one shared avgdl would make a number or a product name score twice as
        # high in English chunks as in Chinese ones
        return self.encoder.average_lengths(self.bags, self.languages)

    def weigh(self, avgdl_by_language: Mapping[str, float], fallback: float) -> None:
        """Compute every weight, each item with its language's avgdl (`fallback` for a language without one)."""
        per_item = np.array([avgdl_by_language.get(language, fallback) for language in self.languages], dtype=float)
        self._weights = self.encoder.document_weights(self.bags, per_item)

    def vectors(self, start: int, stop: int) -> list[SparseVector]:
        """The sparse vectors of items `start` to `stop` (after `weigh`)."""
        offsets = self.bags.offsets[start : stop + 1]
        low, high = int(offsets[0]), int(offsets[-1])
        ids, weights = self.bags.ids[low:high].tolist(), self._weights[low:high].tolist()
        bounds = (offsets - low).tolist()
        return [SparseVector(ids[a:b], weights[a:b]) for a, b in pairwise(bounds)]


def write_items(
    store: VectorStore,
    collection: str,
    embedder: Embedder,
    items: Sequence[BuildItem],
    sparse: SparseSide,
    *,
    batch_size: int,
    advance: Callable[[int], None],
) -> None:
    """Embed the items batch by batch and write them with their sparse vectors; `advance(n)` after each batch.
    Points are written `WRITE_POINTS` at a time: a write's cost is mostly per statement and per commit."""
    pending: list[StorePoint] = []
    for start in range(0, len(items), batch_size):
        batch = items[start : start + batch_size]
        dense = embed_batch(embedder, [item.text for item in batch], sparse.normalized[start : start + batch_size])
        vectors = sparse.vectors(start, start + len(batch))
        pending += [
            StorePoint(point_id=item.point_id, dense=vector, sparse=bm25, payload=item.payload)
            for item, vector, bm25 in zip(batch, dense, vectors, strict=True)
        ]
        if len(pending) >= WRITE_POINTS or start + batch_size >= len(items):
            store.upsert(collection, pending)
            pending = []
        advance(len(batch))


def embed_batch(
    embedder: Embedder, texts: Sequence[str], normalized: Sequence[str] | None = None
) -> Sequence[Sequence[float]] | np.ndarray:
    """`embedder.embed_documents(texts)`, checked: one vector per text, each of the embedder's dimension (a wrong
    answer must fail the build, not be written into it). `normalized`: the texts through `normalize`, which the
    offline embedder then does not do again."""
    vectors: Sequence[Sequence[float]] | np.ndarray
    if isinstance(embedder, LexicalEmbedder) and type(embedder).embed_documents is LexicalEmbedder.embed_documents:
        # the offline embedder's float32 matrix as it is: a list of Python floats per row would be converted back
        vectors = embedder.encode(texts) if normalized is None else embedder.encode(normalized, normalized=True)
    else:
        vectors = embedder.embed_documents(texts)
    if len(vectors) != len(texts):
        raise ValueError(f"embedder {embedder.name} returned {len(vectors)} vectors for {len(texts)} texts")
    for vector in vectors:
        if len(vector) != embedder.dim:
            raise ValueError(f"embedder {embedder.name} returned {len(vector)} dimensions, not {embedder.dim}")
    return vectors


class BuildSteps:
    """Progress of a build, and its cancellation asked between batches."""

    def __init__(self, total: int, progress: Progress | None, should_stop: Callable[[], bool] | None) -> None:
        self.total, self.done = total, 0
        self._progress, self._should_stop = progress, should_stop

    def stopped(self) -> bool:
        return self._should_stop is not None and self._should_stop()

    def advance(self, count: int) -> None:
        self.done += count
        if self._progress is not None:
            self._progress(self.done, self.total)
        if self.stopped():
            raise IndexCancelled("the build was cancelled")
