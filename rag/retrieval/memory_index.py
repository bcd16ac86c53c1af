"""Exact search over one collection held in numpy arrays: the local-mode query engine.

qdrant-client's local mode scores a sparse query with a pure-Python merge against every point (about 330 ms
per question over 1,000 DRCD paragraphs), far from a 15 ms budget. Local mode is single-process by design (it
locks its folder), so this process sees every write: `VectorStore` loads the live collection's vectors once into
an inverted index (sparse) and a matrix (dense) and answers from them, with the same scores Qdrant gives
(BM25 IDF ``ln((N-df+0.5)/(df+0.5)+1)`` like `Modifier.IDF`, cosine for dense; a parity test pins both).
Qdrant stays the storage and the source of truth; a Qdrant server answers its own queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rag.retrieval.sparse import SparseVector


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    point_id: str
    dense: Sequence[float]
    sparse: SparseVector
    payload: dict[str, Any]


class MemoryIndex:
    """Immutable once built, so searches on other threads need no lock while the store swaps in a new one."""

    def __init__(self, records: Sequence[MemoryRecord], *, dim: int) -> None:
        self.ids = [r.point_id for r in records]
        self.payloads = [r.payload for r in records]
        n = len(records)
        self.dense = np.zeros((n, dim), dtype=np.float32)
        for row, record in enumerate(records):
            if len(record.dense):
                self.dense[row] = record.dense
        norms = np.linalg.norm(self.dense, axis=1, keepdims=True)
        np.divide(self.dense, norms, out=self.dense, where=norms > 0)
        # inverted index: all (token, row, weight) triples sorted by token, one slice per token
        lengths = [len(r.sparse.indices) for r in records]
        tokens = np.concatenate(
            [np.asarray(r.sparse.indices, dtype=np.int64) for r in records] or [np.zeros(0, np.int64)]
        )
        weights = np.concatenate(
            [np.asarray(r.sparse.values, dtype=np.float32) for r in records] or [np.zeros(0, np.float32)]
        )
        rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
        order = np.argsort(tokens, kind="stable")
        self._rows, self._weights = rows[order], weights[order]
        unique, starts, counts = np.unique(tokens[order], return_index=True, return_counts=True)
        self._postings = dict(zip(unique.tolist(), zip(starts.tolist(), counts.tolist(), strict=True), strict=True))
        self._languages = np.array([p.get("language", "") for p in self.payloads], dtype=object)
        self._kinds = np.array([p.get("kind", "") for p in self.payloads], dtype=object)

    def __len__(self) -> int:
        return len(self.ids)

    def mask(self, *, language: str | None = None, kind: str | None = None) -> np.ndarray | None:
        """Rows passing the filters, or None for no filter."""
        if language is None and kind is None:
            return None
        keep = np.ones(len(self), dtype=bool)
        if language is not None:
            keep &= self._languages == language
        if kind is not None:
            keep &= self._kinds == kind
        return keep

    def idf(self, document_frequency: int) -> float:
        n = len(self)
        return float(np.log((n - document_frequency + 0.5) / (document_frequency + 0.5) + 1.0))

    def sparse_scores(self, query: SparseVector) -> tuple[np.ndarray, np.ndarray]:
        """(scores, matched): BM25 per row, and whether the row shares any token with the query."""
        scores = np.zeros(len(self), dtype=np.float32)
        matched = np.zeros(len(self), dtype=bool)
        for token, weight in zip(query.indices, query.values, strict=True):
            posting = self._postings.get(token)
            if posting is None:
                continue
            start, count = posting
            rows = self._rows[start : start + count]
            # a token occurs once per row, so fancy-index += is safe (no repeated rows)
            scores[rows] += np.float32(weight * self.idf(count)) * self._weights[start : start + count]
            matched[rows] = True
        return scores, matched

    def dense_scores(self, query: Sequence[float]) -> np.ndarray:
        vector = np.asarray(query, dtype=np.float32)
        norm = float(np.linalg.norm(vector))
        if norm > 0:
            vector = vector / norm
        return self.dense @ vector

    def top(self, scores: np.ndarray, limit: int, keep: np.ndarray | None) -> list[tuple[int, float]]:
        """Best `limit` (row, score) among rows in `keep`, best first."""
        if keep is not None:
            scores = np.where(keep, scores, -np.inf)
        limit = min(limit, len(scores))
        if limit <= 0:
            return []
        best = np.argpartition(-scores, limit - 1)[:limit]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(int(i), float(scores[i])) for i in best if np.isfinite(scores[i])]
