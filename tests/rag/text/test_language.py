import pytest

from rag.text.language import (
    EN,
    OTHER,
    ZH_HANS,
    ZH_HANT,
    chinese_script,
    detect_language,
    to_simplified,
    to_traditional,
    to_traditional_async,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("如何重设密码？", ZH_HANS),
        ("如何重設密碼？", ZH_HANT),
        ("How do I reset my password?", EN),
        ("パスワード", OTHER),
        ("パスワードを忘れました", OTHER),
        ("비밀번호를 잊어버렸어요", OTHER),
        ("Как сбросить пароль?", OTHER),
        ("Comment réinitialiser mon mot de passe ?", OTHER),
        ("我忘了密码怎么办", ZH_HANS),
        ("帳號被鎖住了怎麼辦", ZH_HANT),
        ("如何使用 LearnHub App 登入", ZH_HANT),
        ("Can I log in with my 自然人憑證?", EN),
    ],
)
def test_detects_short_questions(text, expected):
    assert detect_language(text) == expected


def test_shared_characters_only_count_as_traditional():
    # 如何登入 is the same in both scripts: the platform's own script wins the tie.
    assert chinese_script("如何登入") == ZH_HANT


def test_text_without_letters_gets_the_default():
    assert detect_language("123?", default=EN) == EN
    assert detect_language("？？") == ZH_HANT


def test_detection_answers_the_same_once_warm():
    # Its per-call cost once warm is measured by scripts/bench_hot_paths.py, not asserted here.
    first = detect_language("如何重设密码？")  # builds the converters and the per-character cache
    assert [detect_language("如何重设密码？") for _ in range(3)] == [first] * 3 == [ZH_HANS] * 3


def test_simplified_to_traditional_uses_taiwan_vocabulary():
    assert to_traditional("软件下载") == "軟體下載"
    assert to_traditional("如何重设密码？") == "如何重設密碼？"


def test_traditional_to_simplified_is_character_by_character():
    assert to_simplified("帳號與密碼") == "帐号与密码"
    assert to_simplified("在線上重設") == "在线上重设"  # not tw2sp's "在在线"


async def test_long_text_converts_off_the_loop_with_the_same_result():
    text = "软件下载说明。" * 100
    assert await to_traditional_async(text) == to_traditional(text)
