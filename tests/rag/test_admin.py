"""The answer evaluations' list in the admin, in the reader's language."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from rag.models import AnswerEvaluation

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("language", "words", "absent"),
    [
        ("en", ["Select answer evaluation to change", "Citation accuracy", "Refusal rate", "By dataset"], "引用"),
        ("zh-hant", ["選擇 回答評估 來修改", "引用正確率", "拒答率", "以 資料集"], "Citation"),
    ],
)
def test_the_list_names_the_model_its_columns_and_filters_in_the_admin_language(
    admin_client: Client, language: str, words: list[str], absent: str
) -> None:
    AnswerEvaluation.objects.create(
        dataset="DRCD_dev.json",
        producer="chat/offline/abc",
        questions=3,
        containment=0.5,
        citation_accuracy=0.4,
        refusal_rate=0.1,
        answer_chars_median=120,
        latency_ms_p50=5.0,
        latency_ms_p95=9.0,
    )
    page = admin_client.get(reverse("admin:rag_answerevaluation_changelist"), HTTP_ACCEPT_LANGUAGE=language)
    text = page.content.decode()
    assert [word for word in words if word not in text] == []
    assert absent not in text
