"""Compatibility characters (Kangxi radicals from PDFs, full-width letters) never reach the index or an answer."""

from __future__ import annotations

from pathlib import Path

from rag.retrieval.loaders import load_documents
from rag.retrieval.markdown import LoadError
from rag.text.compat import fold_compatibility


def test_kangxi_radicals_become_the_ideographs_they_look_like() -> None:
    assert fold_compatibility("\u2f3c得與\u2f9e輛、\u2f1d試") == "心得與車輛、口試"


def test_chinese_punctuation_and_ordinary_text_are_kept() -> None:
    text = "請於 30 分鐘內（含）完成：步驟一，步驟二。"
    assert fold_compatibility(text) == text
    assert fold_compatibility("ＡＢＣ１２３\u00a0ﬁle") == "ABC123 file"


def test_loaded_documents_are_folded(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("學習\u2f3c得\n\n上課前請先確認\u2f9e位。", encoding="utf-8")
    errors: list[LoadError] = []
    (document,) = load_documents(tmp_path, errors=errors)
    assert (document.title, document.text) == ("學習心得", "上課前請先確認車位。")
    assert "\u2f3c" not in document.text and "\u2f9e" not in document.text + document.title
