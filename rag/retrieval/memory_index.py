"""Exact search over one build held in numpy arrays: the in-memory replica every worker answers from.

A Qdrant server answers its own queries. Without one, the builds live in the database (or qdrant-client's local
mode, in tests) and each process loads the live build into a `MemoryIndex`: an inverted index for the sparse
(BM25) side and, the first time a dense or hybrid search asks for it, a matrix for the dense side. Scores are the
ones Qdrant gives (BM25 IDF ``ln((N-df+0.5)/(df+0.5)+1)`` like `Modifier.IDF`, cosine for dense; a parity test
pins both). qdrant-client's local mode scores a sparse query with a pure-Python merge against every point, about
330 ms per question over 1,000 DRCD paragraphs; this takes well under a millisecond.

The layout is what a worker holding 20,000 chunks can afford (docs/benchmarks/retrieval.md): payloads stay JSON
text until a hit needs one (a search decodes its top few), language and kind are small integer codes, the postings
are three flat arrays searched by `numpy.searchsorted`, and the dense matrix (4 KB a point at 1,024 dimensions) is
loaded only where a search mode uses it: with the default lexical embedder and BM25, never.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rag.retrieval.sparse import SparseVector

DenseLoader = Callable[[], dict[str, Sequence[float] | np.ndarray]]
# a payload's doc_id as JSON writes it (a quote inside a string value is escaped, so this never matches there)
_DOC_ID_RE = re.compile(r'"doc_id":\s*("(?:[^"\\]|\\.)*")')


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    point_id: str
    sparse: SparseVector
    payload: dict[str, Any] | str  # a dict, or its JSON text (decoded when a hit needs it)
    language: str = ""
    kind: str = ""
    dense: Sequence[float] | np.ndarray = ()


class Payloads:
    """The points' payloads as JSON text, decoded one at a time (`payloads[row]` is a fresh dict)."""

    __slots__ = ("_texts",)

    def __init__(self, texts: list[str]) -> None:
        self._texts = texts

    def __len__(self) -> int:
        return len(self._texts)

    def __getitem__(self, row: int) -> dict[str, Any]:
        return dict(json.loads(self._texts[row]))

    def doc_id(self, row: int) -> str:
        """The row's doc_id, read without decoding the whole payload."""
        text = self._texts[row]
        match = _DOC_ID_RE.search(text)
        found = json.loads(match.group(1)) if match else json.loads(text).get("doc_id", "")
        return str(found or "")


class _Codes:
    """Strings as small integer codes: a mask over 20,000 rows compares integers, not Python objects."""

    def __init__(self, values: Iterable[str]) -> None:
        self.names: dict[str, int] = {}
        self.codes = np.array([self.names.setdefault(v, len(self.names)) for v in values], dtype=np.int16)

    def equal(self, value: str) -> np.ndarray:
        code = self.names.get(value)
        if code is None:
            return np.zeros(len(self.codes), dtype=bool)
        return self.codes == code


class MemoryIndex:
    """Immutable once built (the dense matrix is added once, under a lock), so searches on other threads need no
    lock while the store swaps in a new one."""

    def __init__(
        self,
        records: Sequence[MemoryRecord],
        *,
        dim: int,
        dense: DenseLoader | None = None,
        postings: Postings | None = None,
    ) -> None:
        """`postings`, when given, are the records' inverted index as `postings()` returned it for the same
        records in the same order (their sparse vectors are then not read): loading it is a few array views,
        where building it sorts every (token, point) pair of the build."""
        self.dim = dim
        self.ids = [r.point_id for r in records]
        self.payloads = Payloads(
            [r.payload if isinstance(r.payload, str) else json.dumps(r.payload, ensure_ascii=False) for r in records]
        )
        self._languages = _Codes(r.language or _field(r.payload, "language") for r in records)
        self._kinds = _Codes(r.kind or _field(r.payload, "kind") for r in records)
        if postings is None:
            self._build_postings(records)
        else:
            self._tokens, self._starts, self._counts, self._rows, self._weights = postings.arrays(len(records))
        # the dense side: given with the records, or loaded by `dense` when a search first needs it
        given = {r.point_id: r.dense for r in records if len(r.dense)}
        self._dense: np.ndarray | None = self._matrix(given) if given else None
        self._dense_loader = None if self._dense is not None else dense
        self._dense_lock = threading.Lock()
        self._documents: dict[str, list[int]] | None = None  # doc_id -> rows, made when first asked

    def _build_postings(self, records: Sequence[MemoryRecord]) -> None:
        # every (token, row, weight) triple sorted by token: a token's postings are one slice of two arrays. Token
        # ids fit 31 bits (rag.retrieval.sparse); rows within a token may come in any order (each row once), so an
        # unstable sort does, and the token boundaries come from one pass over the sorted array.
        lengths = [len(r.sparse.indices) for r in records]
        tokens = np.concatenate(
            [np.asarray(r.sparse.indices, dtype=np.int32) for r in records] or [np.zeros(0, np.int32)]
        )
        weights = np.concatenate(
            [np.asarray(r.sparse.values, dtype=np.float32) for r in records] or [np.zeros(0, np.float32)]
        )
        rows = np.repeat(np.arange(len(records), dtype=np.int32), lengths)
        # each pair's position packed under its token: sorting the integers (SIMD in numpy) is the argsort
        positions = np.arange(len(tokens), dtype=np.int64)
        order = np.sort((tokens.astype(np.int64) << 32) | positions) & 0xFFFFFFFF
        tokens = tokens[order]
        self._rows, self._weights = rows[order], weights[order]
        first = np.ones(len(tokens), dtype=bool)
        np.not_equal(tokens[1:], tokens[:-1], out=first[1:])
        self._starts = np.flatnonzero(first)
        self._tokens = tokens[self._starts]
        self._counts = np.diff(np.append(self._starts, len(tokens)))

    def __len__(self) -> int:
        return len(self.ids)

    def postings(self) -> Postings:
        """The inverted index, to be stored beside the build and given back to a `MemoryIndex` of the same points."""
        return Postings.pack(self._tokens, self._starts, self._counts, self._rows, self._weights)

    def document_rows(self, doc_id: str) -> list[int]:
        """The rows of one document's points, in index order. The map is made on the first call (one pass over
        the payloads' text) and kept: the index never changes."""
        documents = self._documents
        if documents is None:
            documents = {}
            for row in range(len(self.payloads)):
                documents.setdefault(self.payloads.doc_id(row), []).append(row)
            self._documents = documents  # two threads may both build it: the same map, and a plain assignment
        return documents.get(doc_id, [])

    def mask(self, *, language: str | None = None, kind: str | None = None) -> np.ndarray | None:
        """Rows passing the filters, or None for no filter."""
        if language is None and kind is None:
            return None
        keep = np.ones(len(self), dtype=bool)
        if language is not None:
            keep &= self._languages.equal(language)
        if kind is not None:
            keep &= self._kinds.equal(kind)
        return keep

    def idf(self, document_frequency: int) -> float:
        n = len(self)
        return float(np.log((n - document_frequency + 0.5) / (document_frequency + 0.5) + 1.0))

    def idfs(self, tokens: Sequence[int]) -> np.ndarray:
        """BM25's IDF of each token id, as `sparse_scores` weighs it (0 for a token no point holds)."""
        out = np.zeros(len(tokens), dtype=np.float64)
        if not len(tokens) or not len(self._tokens):
            return out
        asked = np.asarray(tokens, dtype=np.int64)
        found = np.searchsorted(self._tokens, asked)
        found[found >= len(self._tokens)] = 0
        held = self._tokens[found] == asked
        df = self._counts[found[held]].astype(np.float64)
        n = len(self)
        out[held] = np.log((n - df + 0.5) / (df + 0.5) + 1.0)
        return out

    def sparse_scores(self, query: SparseVector) -> tuple[np.ndarray, np.ndarray]:
        """(scores, matched): BM25 per row, and whether the row shares any token with the query."""
        scores = np.zeros(len(self), dtype=np.float32)
        matched = np.zeros(len(self), dtype=bool)
        if not len(query.indices) or not len(self._tokens):
            return scores, matched
        asked = np.asarray(query.indices, dtype=np.int32)
        found = np.searchsorted(self._tokens, asked)
        found[found >= len(self._tokens)] = 0  # past the last token: compared below, and unequal
        for token, weight, position in zip(asked, query.values, found, strict=True):
            if self._tokens[position] != token:
                continue
            start, count = int(self._starts[position]), int(self._counts[position])
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
        return self.dense_matrix() @ vector

    def dense_matrix(self) -> np.ndarray:
        """The rows' unit vectors (zeros for points without one); loaded the first time a search needs them."""
        if self._dense is None:
            with self._dense_lock:
                if self._dense is None:
                    loaded = self._dense_loader() if self._dense_loader is not None else {}
                    self._dense = self._matrix(loaded)
                    self._dense_loader = None
        return self._dense

    def _matrix(self, vectors: dict[str, Sequence[float] | np.ndarray]) -> np.ndarray:
        matrix = np.zeros((len(self), self.dim), dtype=np.float32)
        for row, point_id in enumerate(self.ids):
            vector = vectors.get(point_id)
            if vector is not None and len(vector) == self.dim:
                matrix[row] = vector
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        np.divide(matrix, norms, out=matrix, where=norms > 0)
        return matrix

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


class Postings:
    """An inverted index as bytes: five little-endian arrays after a header of their lengths."""

    _DTYPES: tuple[np.dtype[Any], ...] = (
        np.dtype("<i4"),
        np.dtype("<i8"),
        np.dtype("<i8"),
        np.dtype("<i4"),
        np.dtype("<f4"),
    )

    def __init__(self, data: bytes) -> None:
        self.data = data

    @classmethod
    def pack(cls, *arrays: np.ndarray) -> Postings:
        header = np.asarray([len(a) for a in arrays], dtype="<i8").tobytes()
        body = b"".join(np.ascontiguousarray(a, dtype=t).tobytes() for a, t in zip(arrays, cls._DTYPES, strict=True))
        return cls(header + body)

    def arrays(self, points: int) -> tuple[np.ndarray, ...]:
        """(tokens, starts, counts, rows, weights), views on the bytes; ValueError when they do not fit `points`."""
        lengths = np.frombuffer(self.data, dtype="<i8", count=5)
        offset, out = 5 * 8, []
        for length, dtype in zip(lengths, self._DTYPES, strict=True):
            out.append(np.frombuffer(self.data, dtype=dtype, count=int(length), offset=offset))
            offset += int(length) * dtype.itemsize
        if offset != len(self.data) or (len(out[3]) and int(out[3].max()) >= points):
            raise ValueError("postings of another set of points")
        return tuple(out)


def _field(payload: dict[str, Any] | str, key: str) -> str:
    if isinstance(payload, str):
        return ""
    return str(payload.get(key, "") or "")
