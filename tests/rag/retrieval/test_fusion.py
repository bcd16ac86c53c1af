"""Weighted score fusion beside RRF: normalised scores, the weight between the two sides."""

from __future__ import annotations

import pytest

from rag.retrieval.store import rrf, weighted

SPARSE = [("a", 12.0), ("b", 11.5), ("c", 3.0)]
DENSE = [("c", 0.91), ("b", 0.90), ("d", 0.60)]


def test_weight_zero_is_bm25_and_one_is_cosine() -> None:
    assert [k for k, _ in weighted(SPARSE, DENSE, weight=0.0)][:3] == ["a", "b", "c"]
    assert [k for k, _ in weighted(SPARSE, DENSE, weight=1.0)][:2] == ["c", "b"]


def test_scores_are_normalised_per_side_and_a_missing_side_counts_zero() -> None:
    fused = dict(weighted(SPARSE, DENSE, weight=0.5))
    assert fused["a"] == pytest.approx(0.5)  # best BM25, not among the dense candidates
    assert fused["b"] == pytest.approx(0.5 * (8.5 / 9.0) + 0.5 * (0.30 / 0.31))
    assert fused["d"] == pytest.approx(0.0)  # last of the dense list, no BM25 match


def test_unlike_rrf_it_keeps_how_far_apart_the_scores_are() -> None:
    # b is a close second on both sides: RRF ranks it first (1/60 + 1/61 beats a's 1/60 + nothing)...
    assert rrf([[(0, 12.0), (1, 11.5)], [(2, 0.91), (1, 0.90)]], k=60)[0][0] == 1
    # ...and so does the weighted fusion, but a passage far ahead on BM25 is not outvoted by a near tie
    far = [("a", 30.0), ("b", 5.0), ("c", 4.0)]
    assert weighted(far, DENSE, weight=0.3)[0][0] == "a"


def test_empty_sides() -> None:
    assert weighted([], [], weight=0.5) == []
    assert [k for k, _ in weighted([], DENSE, weight=0.5)] == ["c", "b", "d"]
    assert weighted([("a", 2.0)], [], weight=0.5) == [("a", 0.5)]
