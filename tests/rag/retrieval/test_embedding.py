from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path

import numpy as np

from rag.retrieval.embedding import Embedder, LexicalEmbedder
from rag.text.tokenize import normalize

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


def _reference_latin(embedder: LexicalEmbedder, text: str) -> np.ndarray:
    """The Latin features one by one, as the embedder computed them before it batched them (crc32 slots, 1 + log tf
    added in first-occurrence order)."""
    vector = np.zeros(embedder.dim, dtype=np.float32)
    counts: Counter[str] = Counter()
    for word in re.findall(r"[a-z0-9]+(?:[._'-][a-z0-9]+)*", normalize(text)):
        counts[f"w:{word}"] += 1
        if not word.isdigit() and len(word) > 3:
            padded = f"<{word}>"
            counts.update(f"t:{padded[i : i + 3]}" for i in range(len(padded) - 2))
    for feature, count in counts.items():
        digest = zlib.crc32(feature.encode("utf-8"))
        weight = 1.0 if feature[0] == "w" else 0.5
        vector[digest % embedder.dim] += (-weight if digest & 0x80000000 else weight) * (1.0 + math.log(count))
    return vector


def test_a_batch_gives_each_text_the_vector_it_gets_alone() -> None:
    embedder = LexicalEmbedder(dim=64)
    texts = [*TEXTS, "", "中", "enrol enrolment enrolling 2024", "重設密碼 reset password 重設"]
    batch = embedder.encode(texts)
    for text, row in zip(texts, batch, strict=True):
        assert np.array_equal(LexicalEmbedder(dim=64).encode([text])[0], row)


def test_latin_features_are_added_as_one_by_one() -> None:
    embedder = LexicalEmbedder(dim=64, cjk_ngrams=(1,), cjk_weights=(0.0,))
    for text in ("enrol enrolment enrolling Enrol 2024 e-mail", "the course, the course; a b c d", "x"):
        expected = _reference_latin(embedder, text)
        norm = float(np.linalg.norm(expected))
        assert np.array_equal(embedder.encode([text])[0], expected / norm if norm else expected)


def test_texts_normalised_by_the_caller_give_the_same_vectors() -> None:
    embedder = LexicalEmbedder(dim=64)
    texts = [*TEXTS, "ＡＰＰ登入 3次失敗 I'm locked out", "課程代碼A-1234（線上）"]
    given = embedder.encode([normalize(text) for text in texts], normalized=True)
    assert np.array_equal(given, embedder.encode(texts))
