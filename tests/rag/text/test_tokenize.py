from __future__ import annotations

import random
import unicodedata
from collections import Counter

import pytest

from rag.text.tokenize import normalize, token_bag, tokenize

TEXTS = [
    "",
    "中",
    "如何重設密碼？請到「帳號設定」頁面。",
    "e站30分鐘內 reset the password, then log in again",
    "ＡＰＰ登入 3次失敗 I'm locked out of my account",
]


@pytest.mark.parametrize(
    "options",
    [{}, {"bigrams": False}, {"drop_stopwords": True}, {"bigrams": True, "drop_stopwords": True, "joins": True}],
)
def test_the_bag_holds_the_same_tokens_as_tokenize(options: dict[str, bool]) -> None:
    for text in TEXTS:
        assert Counter(token_bag(text, **options)) == Counter(tokenize(text, **options))


def test_tokenize_keeps_each_character_before_its_bigram() -> None:
    assert tokenize("重設密") == ["重", "重設", "設", "設密", "密"]


def test_normalize_is_nfkc_lower_case() -> None:
    # full-width forms are mapped before NFKC, which runs only when something else is left for it: the same text
    pool = [chr(c) for c in (*range(0x20, 0x7F), *range(0xFF00, 0xFF70))]
    pool += list("\u3000\u0301\u0308\uf900\u2460\u3392\ufb01\u00a0\u212b\u1e9e\u0130…℃中文，。（）")
    rng = random.Random(7)
    for _ in range(3000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 12)))
        assert normalize(text) == unicodedata.normalize("NFKC", text).lower(), repr(text)
    assert normalize("ＡＢＣ，１２３　分") == "abc,123 分"
