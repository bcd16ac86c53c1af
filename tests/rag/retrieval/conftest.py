"""A small bilingual help-centre corpus written into tmp folders, and stores over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rag.retrieval.embedding import LexicalEmbedder
from rag.retrieval.indexer import build_index
from rag.retrieval.markdown import Document, load_markdown_dir
from rag.retrieval.store import VectorStore
from tests.rag.stores import STORE_PARAMS, open_store

CORPUS = {
    "zh-password-reset.md": """---
title: 如何重設密碼
url: https://help.example/zh/password-reset
language: zh-hant
tags: [account, password]
---

# 如何重設密碼？

忘記登入密碼時，您可以自行在線上重設，不需要來電。

## 重設密碼步驟

1. 在登入頁面點選「忘記密碼」。
2. 輸入帳號與綁定的電子郵件信箱。
3. 開啟信件中的重設連結，連結有效時間為 30 分鐘。
4. 輸入新密碼兩次後按「確認」。

## 收不到重設信件怎麼辦？

請先檢查垃圾郵件匣。若 10 分鐘後仍未收到，請將寄件者加入安全名單後再試一次。
""",
    "en-password-reset.md": """---
title: How to reset your password
url: https://help.example/en/password-reset
language: en
tags: [account, password]
---

# How to reset your password

If you forget your password you can reset it online yourself.

## Steps

1. On the login page select **Forgot password**.
2. Enter your account and the email address linked to it.
3. Open the reset link in the email. The link is valid for 30 minutes.
4. Enter the new password twice and select **Confirm**.
""",
    "zh-enrolment.md": """---
title: 如何報名課程
url: https://help.example/zh/enrolment
language: zh-hant
tags: [courses]
---

# 如何報名課程

## 線上課程

在課程頁面點選「立即報名」，課程會出現在「我的學習」，可以馬上開始上課。同時進行中的線上課程最多 20 門。

## 實體課程

實體課程名額有限，需經機關訓練承辦人審核。報名截止日為開課前 7 天。
""",
    "en-enrolment.md": """---
title: How to enrol in a course
url: https://help.example/en/enrolment
language: en
tags: [courses]
---

# How to enrol in a course

## Online courses

Select **Enrol now** on the course page. You can have at most 20 online courses in progress at once.

## Classroom courses

Classroom courses have limited places and need approval. Applications close 7 days before the course starts.
""",
    "forms/zh-form-account-data-change.md": """---
title: 帳號資料變更申請表
url: https://help.example/zh/forms/account-data-change
language: zh-hant
tags: [form, account]
kind: form
form_id: F-103
form_file: forms/account-data-change-request.pdf
---

# 帳號資料變更申請表（F-103）

無法使用帳號綁定的電子郵件或需要更正姓名時，請下載並填寫本申請表，由機關人事單位核章後寄回。
""",
}


def write_corpus(root: Path, files: dict[str, str] | None = None) -> Path:
    for name, text in (CORPUS if files is None else files).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus")


@pytest.fixture
def documents(corpus_dir: Path) -> list[Document]:
    return load_markdown_dir(corpus_dir)


@pytest.fixture
def embedder() -> LexicalEmbedder:
    return LexicalEmbedder(dim=256)


@pytest.fixture(params=STORE_PARAMS)
def store_kind(request: pytest.FixtureRequest) -> str:
    """Each store test runs on every kind of store: the store's contract (see tests/rag/stores.py)."""
    return str(request.param)


@pytest.fixture
def store(store_kind: str, tmp_path: Path) -> Iterator[VectorStore]:
    with open_store(store_kind, tmp_path) as opened:
        yield opened


@pytest.fixture
def indexed_store(store: VectorStore, documents: list[Document], embedder: LexicalEmbedder) -> VectorStore:
    build_index(documents, store, embedder)
    return store
