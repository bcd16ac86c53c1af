from rag.rules import followup
from rag.rules.transforms import Transformed, previous_question, split_answer, transform_previous_answer
from rag.state import Turn

PREVIOUS = (
    "忘記密碼時可以自行重設[1]。在登入頁面點選「忘記密碼」[1]。連結有效時間為 30 分鐘[1]。帳號會被鎖住 15 分鐘[2]。"
    "\n\n資料來源：\n[1] 如何重設密碼 (https://help.example/zh/password-reset)\n"
    "[2] 帳號被鎖住怎麼辦 (https://help.example/zh/account-locked)"
)


def test_sources_block_is_read_back():
    body, sources = split_answer(PREVIOUS)
    assert body.endswith("15 分鐘[2]。")
    assert [(s.ref, s.title, s.url) for s in sources] == [
        (1, "如何重設密碼", "https://help.example/zh/password-reset"),
        (2, "帳號被鎖住怎麼辦", "https://help.example/zh/account-locked"),
    ]


async def test_summary_keeps_whole_sentences_and_only_the_sources_still_cited():
    result = await transform_previous_answer(
        PREVIOUS, followup.SUMMARIZE, language="zh-hant", summary_chars=40, shorten_chars=400
    )
    assert result.text.startswith(
        "忘記密碼時可以自行重設[1]。在登入頁面點選「忘記密碼」[1]。\n\n資料來源：\n[1] 如何重設密碼"
    )
    assert "[2]" not in result.text
    assert [s.ref for s in result.sources] == [1]


async def test_shorten_halves_at_most():
    result = await transform_previous_answer(
        PREVIOUS, followup.SHORTEN, language="zh-hant", summary_chars=200, shorten_chars=400
    )
    body, _ = split_answer(result.text)
    assert len(body) <= len(split_answer(PREVIOUS)[0]) // 2 + 20


async def test_traditional_to_simplified():
    result = await transform_previous_answer(
        PREVIOUS, followup.TRANSLATE_ZH_HANS, language="zh-hans", summary_chars=200, shorten_chars=400
    )
    assert "忘记密码时可以自行重设[1]" in result.text
    assert "资料来源：" in result.text
    assert result.sources[0].title == "如何重设密码"


async def test_english_translation_is_declined_honestly_with_the_answer_kept():
    result = await transform_previous_answer(
        PREVIOUS, followup.TRANSLATE_EN, language="en", summary_chars=200, shorten_chars=400
    )
    assert result.text.startswith("Sorry, translating between Chinese and English needs a language model")
    assert result.text.endswith(PREVIOUS)
    assert len(result.sources) == 2


async def test_asking_for_the_language_it_is_already_in_returns_it():
    english = "Open the link [1].\n\nSources:\n[1] Reset (https://help.example/en)"
    result = await transform_previous_answer(
        english, followup.TRANSLATE_EN, language="en", summary_chars=200, shorten_chars=400
    )
    assert result.text == english


async def test_no_previous_answer():
    result = await transform_previous_answer(
        "", followup.SUMMARIZE, language="en", summary_chars=200, shorten_chars=400
    )
    assert "no previous answer" in result.text


def test_a_source_line_without_a_url_is_read_back():
    _body, sources = split_answer("Open 9 to 5 [1].\n\nSources:\n[1] Library opening hours")
    assert [(s.ref, s.title, s.url) for s in sources] == [(1, "Library opening hours", "")]


async def shortened(previous: str, *, question: str = "") -> Transformed:
    """The previous English answer made shorter, as the node asks (400 characters at most, half of it)."""
    return await transform_previous_answer(
        previous, followup.SHORTEN, language="en", summary_chars=200, shorten_chars=400, previous_question=question
    )


async def test_shorten_keeps_the_sentence_that_answered_the_question_wherever_it_stood():
    # The previous answer answered "How long is the reset link valid?"; its answer is its last sentence.
    previous = (
        "If you have forgotten your password, you can reset it yourself online [1]. Select Send reset link [1]. "
        'We send an email with the subject "Password reset" [1]. Open the link in that email [1]. '
        "The link is valid for 30 minutes and can be used only once [1].\n\n"
        "Sources:\n[1] How do I reset my password (https://help.example/en/password-reset)"
    )
    result = await shortened(previous, question="How long is the reset link valid?")
    body, _ = split_answer(result.text)
    assert "valid for 30 minutes" in body
    assert len(body) <= len(split_answer(previous)[0]) // 2
    assert [s.ref for s in result.sources] == [1]
    # Without the question, the start of the answer, as before.
    blind = await shortened(previous)
    assert split_answer(blind.text)[0].startswith("If you have forgotten your password")


def test_the_previous_question_is_the_last_user_turn():
    history = [
        Turn("user", "如何重設密碼？"),
        Turn("assistant", "…"),
        Turn("user", "連結多久有效？"),
        Turn("assistant", "…"),
    ]
    assert previous_question(history) == "連結多久有效？"
    assert previous_question([]) == ""


async def test_a_question_asking_how_long_keeps_the_sentence_with_the_amount():
    # Two sentences share the question's words equally ("reset link" / "link ... valid"); only one says how long.
    previous = (
        "Select Send reset link [1]. The link is valid for 30 minutes and can be used only once [1]. "
        "At least 12 characters long [1].\n\nSources:\n[1] How do I reset my password (https://help.example/en/reset)"
    )
    result = await shortened(previous, question="How long is the reset link valid?")
    assert split_answer(result.text)[0] == "The link is valid for 30 minutes and can be used only once [1]."
