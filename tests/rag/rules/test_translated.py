"""How much of a question a passage in the other language says, as written or through the glossary."""

from __future__ import annotations

import pytest

from rag.rules.terms import best_coverage, text_terms
from rag.rules.translated import TranslatedQuestion, translated_coverage
from rag.text.glossary import Glossary, builtin_glossary

GLOSSARY = Glossary.parse("lecture recording = 課堂錄影|錄影\nkeep = 保存\npassword = 密碼")


def test_a_term_counts_as_said_when_the_passage_holds_one_of_its_translations() -> None:
    question = "How long are lecture recordings kept?"  # terms: long, lectu, recor, kept
    assert translated_coverage(question, ["課堂錄影保存一年。"], GLOSSARY) == pytest.approx(2 / 4)
    assert translated_coverage(question, ["錄影檔案"], GLOSSARY) == pytest.approx(2 / 4)
    assert translated_coverage(question, ["圖書館開放時間"], GLOSSARY) == 0.0


def test_words_written_alike_count_as_written() -> None:
    assert translated_coverage("密碼 reset 要 30 分鐘嗎", ["The reset link lasts 30 minutes"], GLOSSARY) > 0


def test_a_passage_in_the_askers_language_measures_as_best_coverage_does() -> None:
    reading = TranslatedQuestion("圖書館可以借幾本書？", builtin_glossary())
    passage = "學生最多可借閱 10 本書，借期 28 天。"
    assert reading.own(text_terms(passage)) == best_coverage("圖書館可以借幾本書？", [passage])
