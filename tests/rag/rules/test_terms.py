from rag.rules.terms import (
    best_coverage,
    content_phrases,
    overlap,
    query_terms,
    split_sentences,
    strip_question_words,
    text_terms,
)


def test_chinese_question_scaffolding_is_removed():
    assert strip_question_words("如何重設密碼？") == "重設密碼"
    assert content_phrases("我的帳號被鎖住了，要怎麼解鎖？") == ["帳號被鎖住", "解鎖"]


def test_apply_is_not_mistaken_for_please():
    assert content_phrases("請問怎麼下載時數補登申請表") == ["下載時數補登申請表"]


def test_english_stopwords_are_dropped_and_words_stemmed():
    assert content_phrases("How do I reset my password?") == ["reset", "password"]
    assert query_terms("resetting passwords") == query_terms("reset password")


def test_overlap_is_the_share_of_question_terms_in_the_passage():
    wanted = query_terms("如何重設密碼？")  # 重設 設密 密碼
    assert overlap(wanted, text_terms("請在登入頁重設密碼")) == 1.0
    assert overlap(wanted, text_terms("密碼規則")) == 1 / 3
    assert overlap(set(), text_terms("anything")) == 1.0


def test_best_coverage_is_the_best_passages_share_of_the_question_terms():
    assert best_coverage("How do I reset my password?", ["Forgot password", "Reset your password here"]) == 1.0
    assert best_coverage("How do I reset my password?", ["Forgot password"]) == 0.5
    assert best_coverage("How do I reset my password?", []) == 0.0
    # a Chinese paraphrase keeps the characters where it breaks the bigrams: of 重設 設密 密碼 it says one, of
    # 重 設 密 碼 all four; whichever is found more counts
    assert overlap(query_terms("如何重設密碼？"), text_terms("密碼要重新設定")) == 1 / 3
    assert best_coverage("如何重設密碼？", ["密碼要重新設定"]) == 1.0
    assert best_coverage("如何重設密碼？", ["重新設置碼"]) == 3 / 4


def test_sentences_of_markdown_drop_headings_tables_and_fragments():
    text = (
        "# Title\n\nIntro sentence here. Second one!\n1. **Reset your password.** Select Forgot password.\n"
        "| a | b |\n|---|---|\n- 第一句。第二句很短嗎？\n"
    )
    assert split_sentences(text) == [
        "Intro sentence here.",
        "Second one!",
        "Reset your password: Select Forgot password.",  # a bold label stays with its sentence
        "第二句很短嗎？",  # "第一句。" is too short to stand alone
    ]
