from dataclasses import replace

from rag.rules import answers
from tests.rag.chunk_fixtures import (
    ENROL_EN,
    FORM_ACCOUNT,
    FORM_HOURS,
    LOCKED_ZH,
    PASSWORD_EN,
    PASSWORD_RULES_ZH,
    PASSWORD_ZH,
    REGISTRATION_EN,
    WITHDRAWAL_FAQ_ZH,
    form,
)


def test_extractive_answer_cites_each_sentence_and_lists_only_cited_sources():
    result = answers.extractive_answer("How do I reset my password?", [PASSWORD_EN, ENROL_EN], language="en")
    assert result is not None
    body, _, block = result.text.partition("\n\nSources:\n")
    assert body.count("[1]") >= 2
    assert "[2]" not in body  # the enrolment chunk shares no word with the question
    assert block == "[1] How do I reset my password (https://help.example/en/password-reset)"
    assert [s.ref for s in result.sources] == [1]


def test_extractive_answer_keeps_the_articles_order_of_sentences():
    result = answers.extractive_answer("如何重設密碼？", [PASSWORD_ZH], language="zh-hant")
    assert result is not None
    body = answers.answer_body(result.text)
    assert body.index("忘記密碼") < body.index("新密碼")
    assert body.endswith("[1]。")


def test_extractive_answer_prefers_the_question_language():
    result = answers.extractive_answer("如何重設密碼？", [PASSWORD_EN, PASSWORD_ZH], language="zh-hant")
    assert result is not None
    assert [s.doc_id for s in result.sources] == ["zh-password-reset"]


def test_two_chunks_of_one_article_share_a_number():
    result = answers.extractive_answer("密碼規則", [PASSWORD_ZH, PASSWORD_RULES_ZH], language="zh-hant")
    assert result is not None
    assert len(result.sources) == 1


def test_cite_puts_the_marker_before_closing_punctuation():
    assert answers.cite("連結有效 30 分鐘。", 2, "zh-hant") == "連結有效 30 分鐘[2]。"
    assert answers.cite("The link is valid for 30 minutes.", 1, "en") == "The link is valid for 30 minutes [1]."
    assert answers.cite("No punctuation", 1, "en") == "No punctuation [1]."


def test_forms_answer_links_the_named_form_and_attaches_it():
    result = answers.forms_answer(
        "時數補登申請表在哪裡下載",
        [FORM_ACCOUNT, FORM_HOURS],
        language="zh-hant",
        forms_base_url="/forms/",
        contact="x",
    )
    assert "[下載](/forms/F-101.pdf)" in result.text
    assert "F-103" not in result.text
    assert [(a.name, a.url, a.media_type) for a in result.attachments] == [
        ("F-101.pdf", "/forms/F-101.pdf", "application/pdf")
    ]
    assert result.sources[0].kind == "form"
    assert result.sources[0].download_url == "/forms/F-101.pdf"


def test_forms_answer_lists_every_form_for_a_generic_request():
    result = answers.forms_answer(
        "我要下載表單", [FORM_ACCOUNT, FORM_HOURS], language="zh-hant", forms_base_url="/f/", contact="x"
    )
    assert len(result.attachments) == 2


def test_form_download_url_uses_the_file_name_under_the_base_url():
    chunk = form("F-1", "", title="t", form_file="forms/hours correction.pdf")
    assert answers.form_download_url(chunk, "/forms/") == "/forms/hours%20correction.pdf"


def test_forms_answer_without_forms_is_honest():
    result = answers.forms_answer("表單", [], language="en", forms_base_url="/f/", contact="call us")
    assert "couldn't find a matching form" in result.text
    assert "call us" in result.text


def test_export_of_named_forms_lists_their_ids():
    result = answers.export_answer(
        "匯出時數補登的表單", [FORM_HOURS, FORM_ACCOUNT], language="zh-hant", export_url="/x.csv"
    )
    assert result.attachments[0].url == "/x.csv?ids=F-101"
    assert result.attachments[0].media_type == "text/csv"
    assert "/x.csv?ids=F-101" in result.text


def test_export_of_all_forms_has_no_ids():
    result = answers.export_answer(
        "匯出所有表單清單", [FORM_HOURS, FORM_ACCOUNT], language="zh-hant", export_url="/x.csv"
    )
    assert result.attachments[0].url == "/x.csv"


def test_no_answer_mentions_contact_and_related_articles():
    result = answers.no_answer("密碼多久過期", [PASSWORD_ZH, ENROL_EN], language="zh-hant", contact="客服 123")
    assert "找不到" in result.text
    assert "客服 123" in result.text
    assert [s.doc_id for s in result.sources] == ["zh-password-reset"]


def test_summary_keeps_the_newest_turns_within_the_cap():
    summary = ""
    for i in range(30):
        summary = answers.updated_summary(summary, f"question {i}", f"Answer number {i} [1].\n\nSources:\n[1] t (u)")
    assert len(summary) <= 500
    assert summary.startswith("Q: ")
    assert summary.endswith("Q: question 29 A: Answer number 29.")


def test_headings_of_merged_sections_never_become_sentences_zh():
    result = answers.extractive_answer("退選會影響研習時數嗎？", [WITHDRAWAL_FAQ_ZH], language="zh-hant")
    assert result is not None
    body = answers.answer_body(result.text)
    assert "退選會影響研習時數嗎" not in body  # the FAQ's question is its heading
    assert "只有完成課程才會取得時數" in body  # the answer under it is kept


def test_headings_of_merged_sections_never_become_sentences_en():
    result = answers.extractive_answer("My verification link has expired", [REGISTRATION_EN], language="en")
    assert result is not None
    body = answers.answer_body(result.text)
    assert "My verification link has expired" not in body
    assert "Resend verification email" in body
    # the link's validity, in step 2, says nothing of the question the sentence under its heading did not
    assert "valid for 24 hours" not in body


def test_a_title_and_heading_context_line_is_not_a_sentence():
    for plain, language, question in (
        (PASSWORD_ZH, "zh-hant", "如何重設密碼？"),
        (PASSWORD_EN, "en", "How do I reset my password?"),
    ):
        context = f"{plain.title} > {plain.heading.split(' > ')[-1]}"
        prefixed = replace(plain, text=f"{context}\n{plain.text}")
        result = answers.extractive_answer(question, [prefixed], language=language)
        assert result is not None
        body = answers.answer_body(result.text)
        assert context not in body and plain.title not in body
        without_context = answers.extractive_answer(question, [plain], language=language)
        assert without_context is not None and body == answers.answer_body(without_context.text)


def test_the_opening_used_when_little_matches_skips_headings():
    # one sentence matches one word of three: the answer is filled up with the chunk's opening, which starts with
    # a heading
    result = answers.extractive_answer("Activation pending, weird?", [REGISTRATION_EN], language="en")
    assert result is not None
    body = answers.answer_body(result.text)
    assert "Account not activated" in body
    assert "Registration steps" not in body and "Select Register on the home page" in body


def test_a_heading_inside_a_chunk_lends_its_words_to_the_text_under_it():
    # the locked-account chunk ranks first and mentions 研習時數; the FAQ answers the question under its heading
    locked = replace(LOCKED_ZH, text="鎖定只是暫停登入，您的課程進度、研習時數與證書都不受影響。")
    result = answers.extractive_answer("退選會影響研習時數嗎？", [locked, WITHDRAWAL_FAQ_ZH], language="zh-hant")
    assert result is not None
    body = answers.answer_body(result.text)
    assert body.startswith("不會扣除已取得的時數[1]。")
    assert result.sources[0].doc_id == "zh-withdrawal"


def test_each_source_carries_the_start_of_its_passage_as_a_preview():
    result = answers.extractive_answer("How do I reset my password?", [PASSWORD_EN], language="en")
    assert result is not None
    snippet = result.sources[0].as_dict()["snippet"]
    assert snippet and " ".join(PASSWORD_EN.text.split()).startswith(snippet.removesuffix("…"))
    assert len(snippet) <= 281


def test_a_source_without_a_url_is_listed_without_empty_brackets():
    no_url = replace(PASSWORD_EN, url="", doc_id="hours", title="Library opening hours")
    result = answers.extractive_answer("How do I reset my password?", [no_url], language="en")
    assert result is not None
    assert result.text.endswith("\n[1] Library opening hours")


def test_a_preview_is_plain_text_cut_near_its_limit():
    from rag.state import passage_snippet

    assert passage_snippet("# Steps\n\nSelect **Log in**, then `Send`.") == "Steps Select Log in, then Send."
    long = "word " * 100
    snippet = passage_snippet(long, limit=50)
    assert snippet.endswith("…") and len(snippet) <= 51 and not snippet[:-1].endswith(" ")
