from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from rag.retrieval.embedding import Embedder, LexicalEmbedder

ROOT = Path(__file__).resolve().parents[3]
TEXTS = ["如何重設密碼？", "How do I reset my password?", "忘記密碼 reset 30 分鐘", ""]


def test_protocol_and_shape() -> None:
    embedder = LexicalEmbedder(dim=64)
    assert isinstance(embedder, Embedder)
    assert embedder.dim == 64
    vectors = embedder.embed_documents(TEXTS)
    assert len(vectors) == 4
    assert all(len(v) == 64 for v in vectors)
    assert len(embedder.embed_query("密碼")) == 64


def test_vectors_are_unit_length_and_empty_is_zero() -> None:
    matrix = np.array(LexicalEmbedder().embed_documents(TEXTS))
    norms = np.linalg.norm(matrix, axis=1)
    assert np.allclose(norms[:3], 1.0, atol=1e-5)
    assert norms[3] == 0.0


def test_deterministic_across_processes() -> None:
    # a fresh interpreter has another hash() seed: the vectors must not change
    code = (
        "import json; from rag.retrieval.embedding import LexicalEmbedder; "
        f"print(json.dumps(LexicalEmbedder(dim=128).embed_documents({TEXTS!r})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123"},
    )
    assert np.allclose(json.loads(result.stdout), LexicalEmbedder(dim=128).embed_documents(TEXTS))


def test_query_equals_document_embedding() -> None:
    embedder = LexicalEmbedder()
    assert np.allclose(embedder.embed_query(TEXTS[0]), embedder.embed_documents([TEXTS[0]])[0])


def test_similar_texts_are_closer() -> None:
    embedder = LexicalEmbedder()
    q, same, other = np.array(embedder.embed_documents(["忘記密碼怎麼重設", "重設密碼的步驟", "課程報名截止日"]))
    assert q @ same > q @ other
    q, same, other = np.array(embedder.embed_documents(["enrolling in courses", "course enrolment", "reset password"]))
    assert q @ same > q @ other  # character trigrams relate "enrolling" and "enrolment"


def test_full_width_and_case_are_normalised() -> None:
    embedder = LexicalEmbedder()
    assert np.allclose(embedder.embed_query("ＡＰＰ 登入"), embedder.embed_query("app 登入"))


def test_name_identifies_parameters() -> None:
    assert LexicalEmbedder(dim=64).name != LexicalEmbedder(dim=128).name
    assert LexicalEmbedder().name == LexicalEmbedder().name
