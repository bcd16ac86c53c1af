import pytest

from rag.semcache.guard import KeyTerms, disagreement, features, negations, numbers, question_normalize


def verdict(a: str, b: str, key_terms: KeyTerms | None = None) -> str | None:
    extra = {} if key_terms is None else {"key_terms": key_terms}
    return disagreement(features(question_normalize(a), **extra), features(question_normalize(b), **extra))


def test_normalisation_drops_punctuation_width_and_case_but_keeps_numbers_whole():
    assert question_normalize("如何重設密碼？") == question_normalize("如何重設密碼") == "如何重設密碼"
    assert question_normalize("How do I reset my PASSWORD?") == "how do i reset my password"
    assert question_normalize("ＡＰＰ　可以用嗎？") == "app 可以用嗎"
    assert question_normalize("Opens at 08:30, takes 1.5 hours.") == "opens at 08:30 takes 1.5 hours"
    assert question_normalize("Can’t I?") == "can't i"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("輸錯 5 次", {"5": 1}),
        ("輸錯五次", {"5": 1}),
        ("輸錯５次", {"5": 1}),
        ("enter it five times", {"5": 1}),
        ("最多二十門課", {"20": 1}),
        ("第三步", {"3": 1}),
        ("統一編號要填嗎", {}),  # 一 in a word is no number
        ("等一下再試", {}),
    ],
)
def test_numbers_are_read_in_every_notation(text, expected):
    assert dict(numbers(question_normalize(text))) == expected


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("如何重設密碼", 0),
        ("如何不重設密碼", 1),
        ("能不能重設密碼", 0),  # A-not-A asks, it does not negate
        ("有沒有無障礙服務", 0),
        ("是否可以退選", 0),
        ("無法登入", 1),
        ("can i withdraw", 0),
        ("can't i withdraw", 1),
        ("i cannot log in without a password", 2),
    ],
)
def test_negations_are_counted_outside_question_forms_and_fixed_words(text, count):
    assert negations(question_normalize(text)) == count


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("如何重設密碼", "密碼要怎麼重設"),
        ("如何重設密碼", "重設密碼的步驟"),
        ("密碼輸錯 5 次會怎樣", "密碼輸錯五次會怎麼樣"),
        ("影片無法播放怎麼辦", "影片不能播放怎麼辦"),  # one negation each
        ("線上課程可以隨時退選嗎", "線上課程能不能隨時退選"),
        ("How do I enrol in a classroom course?", "How can I enroll in a classroom course?"),
        ("How do I reset my password?", "What are the steps to reset my password?"),
    ],
)
def test_paraphrases_agree(a, b):
    assert verdict(a, b) is None


@pytest.mark.parametrize(
    ("a", "b", "reason"),
    [
        ("如何重設密碼", "如何不重設密碼", "negation"),
        ("Can I withdraw from an online course?", "Can't I withdraw from an online course?", "negation"),
        ("密碼輸錯 5 次會怎樣", "密碼輸錯 3 次會怎樣", "numbers"),
        ("How do I download the certificate?", "How do I verify the certificate?", "key_terms"),
        ("帳號被鎖住怎麼辦", "為什麼帳號被鎖住", "key_terms"),  # why is not what to do
        ("How do I turn on app notifications?", "How do I turn off app notifications?", "key_terms"),
        ("What should I do if my video won't play?", "What should I do if my video plays without sound?", "content"),
        ("如何取得繳費單", "如何保存繳費單", "content"),  # outside the lexicon: a swapped word still counts
    ],
)
def test_close_questions_that_ask_something_else_disagree(a, b, reason):
    assert verdict(a, b) == reason


def test_key_terms_are_data_a_corpus_can_replace():
    terms = KeyTerms.build({"refund": "退費|退款|refund"}, {"invoice": ("收據", "receipt", "invoice")})

    assert verdict("如何申請退費", "如何申請退款", terms) is None
    assert verdict("How do I get a refund?", "How do I get a receipt?", terms) == "key_terms"
