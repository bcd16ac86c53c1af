"""Deterministic embeddings by feature hashing.

Each word (lower-cased) and each CJK character bigram is hashed to a signed coordinate, and the sum is
L2-normalised. The vectors depend only on the text, and texts sharing words get a positive cosine
similarity, so a retrieval pipeline run against the simulator still ranks overlapping passages first.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
from typing import Any

_WORD = re.compile(r"[a-z0-9]+")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def _features(text: str) -> list[str]:
    lowered = text.lower()
    features = _WORD.findall(lowered)
    for run in _CJK_RUN.findall(lowered):
        features.extend(run[i : i + 2] for i in range(max(len(run) - 1, 1)))
    # An empty or symbol-only text still needs a stable direction of its own.
    return features or ["\x00" + text]


def embed(text: str, dimensions: int) -> list[float]:
    vector = [0.0] * dimensions
    for feature in _features(text):
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        index = int.from_bytes(digest[:4], "big") % dimensions
        vector[index] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        # Features cancelled out exactly: fall back to a one-hot picked by the whole text.
        vector[int.from_bytes(hashlib.blake2b(text.encode()).digest()[:4], "big") % dimensions] = 1.0
        return vector
    return [v / norm for v in vector]


def encode_base64(vector: list[float]) -> str:
    """Little-endian float32, as OpenAI sends it and the SDK decodes it."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def input_texts(value: Any) -> list[str]:
    """The SDK accepts a string, a list of strings, a token list or a list of token lists."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return [" ".join(map(str, value))]
    if isinstance(value, list):
        return [v if isinstance(v, str) else " ".join(map(str, v)) for v in value]
    raise ValueError("input must be a string, a list of strings or token ids")
