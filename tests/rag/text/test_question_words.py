import pytest

from rag.text.question_words import question_kind


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("學習時數要多久才會上傳？", "time"),
        ("研習時數何時上傳", "time"),
        ("候補名單什麼時候關閉？", "time"),
        ("How long does it take?", "time"),
        ("When are my learning hours reported?", "time"),
        ("每年應完成多少時數？", "quantity"),
        ("How many hours do I need each year?", "quantity"),
        ("如何重設密碼？", "manner"),
        ("How do I reset my password?", "manner"),
        ("帳號被鎖定怎麼辦", "manner"),
        ("為什麼收不到信？", "reason"),
        ("證書要在哪裡下載？", "place"),
        ("Who can see my data?", "person"),
        ("被鎖定會影響學習紀錄嗎？", "yes_no"),
        ("Are electronic certificates valid?", "yes_no"),
    ],
)
def test_the_kind_of_answer_a_question_asks_for(text: str, kind: str) -> None:
    assert question_kind(text) == kind


@pytest.mark.parametrize("text", ["重設密碼步驟", "上傳時程", "Reporting schedule", "My learning hours are missing"])
def test_a_heading_that_asks_nothing_has_no_kind(text: str) -> None:
    assert question_kind(text) == ""
