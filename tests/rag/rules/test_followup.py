import pytest

from rag.rules import followup
from rag.rules.followup import is_followup, transform_instruction


@pytest.mark.parametrize(
    "question",
    [
        "那要多久？",
        "它要多久",
        "這個要怎麼申請",
        "剛剛說的連結在哪",
        "How long does it take?",
        "What about that?",
        "Can you summarise that?",
        "translate the above",
        "用英文",
    ],
)
def test_context_dependent_questions_are_follow_ups(question):
    assert is_followup(question)


@pytest.mark.parametrize(
    "question",
    [
        "如何重設密碼？",
        "How do I reset my password?",
        "Is it possible to change my email?",
        "哪裡下載表單",
        "What should I do when the verification email I requested for my account never arrives in my inbox?",
    ],
)
def test_self_contained_questions_are_not(question):
    assert not is_followup(question)


@pytest.mark.parametrize(
    ("question", "instruction"),
    [
        ("用英文", followup.TRANSLATE_EN),
        ("in English please", followup.TRANSLATE_EN),
        ("可以用英文回答嗎", followup.TRANSLATE_EN),
        ("請用繁體中文", followup.TRANSLATE_ZH_HANT),
        ("翻譯成簡體", followup.TRANSLATE_ZH_HANS),
        ("translate", followup.TRANSLATE_OTHER),
        ("Can you summarise that?", followup.SUMMARIZE),
        ("tl;dr", followup.SUMMARIZE),
        ("shorter please", followup.SHORTEN),
        ("能不能再簡短一點", followup.SHORTEN),
        ("詳細一點", followup.ELABORATE),
        ("tell me more", followup.ELABORATE),
    ],
)
def test_transform_requests(question, instruction):
    assert transform_instruction(question) == instruction


@pytest.mark.parametrize(
    "question",
    [
        "報名的詳細流程是什麼",
        "英文課程有哪些",
        "簡單說明報名流程",
        "Give me a summary of the refund policy for courses",
        "如何重設密碼？",
    ],
)
def test_questions_that_mention_an_instruction_word_are_not_transforms(question):
    assert transform_instruction(question) == ""
