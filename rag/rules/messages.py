"""Fixed reply texts in the two languages the help centre answers in.

Questions in Simplified Chinese are answered in Traditional Chinese (the corpus language, into which they were
normalised); questions in another language get English, the likelier shared language than Chinese.
"""

from __future__ import annotations

from rag.branding.texts import DEFAULT_EN, DEFAULT_ZH
from rag.text.language import is_chinese

ZH = "zh"
EN = "en"

# The organisation's own contact and out-of-scope texts come from its branding (rag.branding); these neutral
# ones name nobody and are used only where no organisation is given (node tests, a bare pipeline).
DEFAULT_CONTACT_ZH = DEFAULT_ZH.contact
DEFAULT_CONTACT_EN = DEFAULT_EN.contact


def reply_language(language: str) -> str:
    return ZH if is_chinese(language) else EN


_TEXTS: dict[str, dict[str, str]] = {
    "out_of_scope": {ZH: DEFAULT_ZH.out_of_scope, EN: DEFAULT_EN.out_of_scope},
    "no_answer": {
        ZH: "抱歉，說明中心裡找不到這個問題的答案。您可以換個說法再問一次，或聯絡客服：{contact}",
        EN: "Sorry, I couldn't find an answer to that in the help centre. You can rephrase your question, or "
        "contact the service desk: {contact}",
    },
    "degraded": {
        ZH: "（完整的智慧助理目前無法使用，以下是說明中心文章裡的相關內容。）",
        EN: "(The full assistant is unavailable right now; here is what the help centre articles say.)",
    },
    "other_language": {
        ZH: "說明中心只有英文版的相關內容，以下照原文引用：",
        EN: "The help centre has this only in Chinese; here is the passage as written:",
    },
    "related": {ZH: "以下文章可能與您的問題有關：", EN: "These articles may be related to your question:"},
    "sources": {ZH: "資料來源：", EN: "Sources:"},
    "no_forms": {
        ZH: "抱歉，找不到符合的表單。您可以說明要辦理的事項再問一次，或聯絡客服：{contact}",
        EN: "Sorry, I couldn't find a matching form. Tell me what you want to apply for and ask again, or contact "
        "the service desk: {contact}",
    },
    "forms_intro": {ZH: "以下是可下載的表單：", EN: "Here are the forms you can download:"},
    "download": {ZH: "下載", EN: "Download"},
    "export_some": {
        ZH: "已為您整理 {count} 份相關表單的清單，可下載 CSV 檔：[forms.csv]({url})",
        EN: "I've put together a list of {count} matching forms. Download it as a CSV file: [forms.csv]({url})",
    },
    "export_all": {
        ZH: "可下載所有表單的清單（CSV 檔）：[forms.csv]({url})",
        EN: "You can download the list of all forms as a CSV file: [forms.csv]({url})",
    },
    "no_previous": {
        ZH: "目前沒有可以處理的上一則回答。請直接告訴我您的問題。",
        EN: "There is no previous answer for me to work on. Please ask your question directly.",
    },
    "cannot_translate": {
        ZH: "抱歉，中英文之間的翻譯需要語言模型，而本服務目前未啟用語言模型，無法翻譯。以下是原來的回答：",
        EN: "Sorry, translating between Chinese and English needs a language model, which this service does not "
        "have enabled right now. Here is the previous answer unchanged:",
    },
}


def text(key: str, language: str, **values: str | int) -> str:
    template = _TEXTS[key][reply_language(language)]
    return template.format(**values) if values else template


# Both spellings of the label that opens an answer's sources block, for reading answers back from history.
SOURCE_LABELS = (_TEXTS["sources"][ZH], _TEXTS["sources"][EN])
