from __future__ import annotations

from collections import Counter

import pytest

from rag.text.tokenize import token_bag, tokenize

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
