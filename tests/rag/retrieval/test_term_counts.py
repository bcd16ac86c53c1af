from __future__ import annotations

import random
import re
import unicodedata
import zlib
from collections import Counter

import numpy as np
import pytest

from rag.retrieval.sparse import BM25Encoder, token_id
from rag.retrieval.term_counts import TermBags, utf8_crc32

# --- the tokenizer as it was before the batch: one Python step per token, kept here as the reference ---------------

_OLD_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
_OLD_TOKEN_RE = re.compile(rf"[{_OLD_CJK}]+|[a-z0-9]+(?:[._'-][a-z0-9]+)*")
_OLD_CJK_RE = re.compile(rf"[{_OLD_CJK}]")
_OLD_STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i if in is it my of on or the to what when where which who "
    "why will with you your me we our this that these those there i'm can't cannot".split()
)


def old_tokenize(text: str) -> list[str]:
    """`rag.text.tokenize.tokenize(text, bigrams=True, drop_stopwords=True, joins=True)` before the batch."""
    tokens: list[str] = []
    previous_end, previous_last = -1, ""
    for match in _OLD_TOKEN_RE.finditer(unicodedata.normalize("NFKC", text).lower()):
        piece = match.group()
        if _OLD_CJK_RE.match(piece):
            for i, char in enumerate(piece):
                tokens.append(char)
                if i + 1 < len(piece):
                    tokens.append(piece[i : i + 2])
            first, last = piece[0], piece[-1]
        else:
            if piece not in _OLD_STOPWORDS:
                tokens.append(piece)
            first = last = piece
        if match.start() == previous_end:
            tokens.append(previous_last + first)
        previous_end, previous_last = match.end(), last
    return tokens


def old_counts(text: str) -> dict[int, int]:
    return dict(Counter(zlib.crc32(token.encode("utf-8")) & 0x7FFFFFFF for token in old_tokenize(text)))


MIXED = [
    "",
    "中",
    "如何重設密碼？請到「帳號設定」頁面，連結有效時間為 30 分鐘。",
    "e站30分鐘內 reset the password, then log in again",
    "ＡＰＰ登入 3次失敗 I'm locked out of my account; e-mail support@help.example.tw 或撥打0800-123-456",
    "西部幹線在1964年全線通車，全長約 400km。The line opened in 1964 and runs 400 km.",
    "課程代碼A-1234（線上）與 B.5678.x 課程；v2.0版 a--b c..d e'-f -g- 'h' 中x.y-文",
    "カタカナとひらがな、한국어 텍스트, and 兼容字 豈 mixed with Ｆｕｌｌ－ｗｉｄｔｈ ＴＥＸＴ１２３",
    "line one\nline two 第二行\n\n第三段 third",
]


def bag_of(bags: TermBags, index: int) -> dict[int, int]:
    start, end = bags.offsets[index], bags.offsets[index + 1]
    return dict(zip(bags.ids[start:end].tolist(), bags.counts[start:end].tolist(), strict=True))


def test_utf8_crc32_is_zlib_crc32_for_every_cjk_character_and_some_pairs() -> None:
    ranges = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x3040, 0x30FF), (0xAC00, 0xD7AF))
    points = np.concatenate([np.arange(low, high + 1, dtype=np.uint32) for low, high in ranges])
    expected = [zlib.crc32(chr(p).encode("utf-8")) & 0x7FFFFFFF for p in points.tolist()]
    assert utf8_crc32(points).tolist() == expected
    rng = np.random.default_rng(5)
    first, second = rng.choice(points, 5000), rng.choice(points, 5000)
    pairs = [zlib.crc32((chr(a) + chr(b)).encode("utf-8")) & 0x7FFFFFFF for a, b in zip(first, second, strict=True)]
    assert utf8_crc32(first, second).tolist() == pairs


def test_the_batch_counts_the_old_tokenizer_s_tokens_on_mixed_chinese_and_english() -> None:
    bags = BM25Encoder().term_bags(MIXED)
    assert len(bags) == len(MIXED)
    for index, text in enumerate(MIXED):
        assert bag_of(bags, index) == old_counts(text), text
    assert bags.lengths.tolist() == [len(old_tokenize(text)) for text in MIXED]


def test_the_batch_agrees_with_the_old_tokenizer_on_random_text() -> None:
    # the characters where words, separators, CJK runs and joins begin and end
    alphabet = "ab9Z.-_' \n中文字カ한é。，Ａ１" + "\ud800"
    rng = random.Random(11)
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(3000)]
    bags = BM25Encoder().term_bags(texts, batch=700)  # several batches, concatenated
    for index, text in enumerate(texts):
        assert bag_of(bags, index) == old_counts(text), repr(text)


def test_batch_weights_are_document_vector_s_bit_for_bit() -> None:
    encoder = BM25Encoder()
    bags = encoder.term_bags(MIXED)
    avgdl = encoder.average_lengths(bags, ["zh"] * 4 + ["en"] * (len(MIXED) - 4))
    per_text = np.array([avgdl["zh"]] * 4 + [avgdl["en"]] * (len(MIXED) - 4))
    weights = encoder.document_weights(bags, per_text)
    for index, text in enumerate(MIXED):
        vector = encoder.document_vector(encoder.term_counts(text), float(per_text[index]))
        start, end = bags.offsets[index], bags.offsets[index + 1]
        assert bags.ids[start:end].tolist() == vector.indices
        assert weights[start:end].tolist() == vector.values  # floats compared exactly


def test_average_lengths_are_average_length_per_group() -> None:
    encoder = BM25Encoder()
    bags = encoder.term_bags(MIXED)
    groups = ["zh" if index % 2 else "en" for index in range(len(MIXED))]
    counts = [encoder.term_counts(text) for text in MIXED]
    expected = {
        group: encoder.average_length([c for c, g in zip(counts, groups, strict=True) if g == group])
        for group in ("zh", "en")
    }
    assert encoder.average_lengths(bags, groups) == expected


def test_other_tokens_are_counted_one_text_at_a_time() -> None:
    encoder = BM25Encoder(tokens=lambda text: text.split())
    bags = encoder.term_bags(["b a b", "", "c"])
    assert [bag_of(bags, i) for i in range(3)] == [
        {token_id("a"): 1, token_id("b"): 2},
        {},
        {token_id("c"): 1},
    ]


@pytest.mark.parametrize("texts", [[], ["only one"]])
def test_small_batches(texts: list[str]) -> None:
    bags = BM25Encoder().term_bags(texts)
    assert len(bags) == len(texts)
    assert [bag_of(bags, i) for i in range(len(texts))] == [old_counts(t) for t in texts]
