"""Retrieved chunks shaped like the demo help centre's (rag/corpus/demo), shared by the node and offline tests.

Articles live at https://help.example/<zh|en>/<slug> (the doc id is "<zh|en>-<slug>"), forms at
https://help.example/forms/<form id>; build new ones with `article`, `form` or, for anything else, `chunk`.
"""

from __future__ import annotations

from typing import Any

from rag.state import RetrievedChunk

HELP_URL = "https://help.example"


def article(
    doc_id: str, text: str, *, title: str, language: str, heading: str = "", part: int = 0, score: float = 0.0
) -> RetrievedChunk:
    """Chunk `part` of the article `doc_id` ("zh-password-reset"), at the article's help-centre URL."""
    section, _, slug = doc_id.partition("-")
    return RetrievedChunk(
        chunk_id=f"{doc_id}#{part}",
        doc_id=doc_id,
        title=title,
        url=f"{HELP_URL}/{section}/{slug}",
        heading=heading,
        language=language,
        score=score,
        text=text,
    )


def form(form_id: str, text: str, *, title: str, form_file: str, language: str = "zh-hant") -> RetrievedChunk:
    """The chunk of a downloadable form, one per form."""
    return RetrievedChunk(
        chunk_id=f"form-{form_id}",
        doc_id=f"form-{form_id}",
        title=title,
        url=f"{HELP_URL}/forms/{form_id}",
        language=language,
        score=0.0,
        kind="form",
        form_id=form_id,
        form_file=form_file,
        text=text,
    )


def chunk(chunk_id: str, text: str = "", *, score: float = 0.5, **fields: object) -> RetrievedChunk:
    """Any chunk, with placeholder title, URL and text unless given (for ranking and fusion tests)."""
    base: dict[str, Any] = {"doc_id": chunk_id.split("#")[0], "title": chunk_id, "url": f"{HELP_URL}/{chunk_id}"}
    base.update(fields)
    return RetrievedChunk(chunk_id=chunk_id, text=text or f"text of {chunk_id}", score=score, **base)


PASSWORD_ZH = article(
    "zh-password-reset",
    "忘記登入密碼時，您可以自行在線上重設密碼，不需要來電。\n"
    "1. 在登入頁面點選「忘記密碼」。\n"
    "2. 輸入帳號與綁定的電子郵件信箱。\n"
    "3. 開啟信件中的重設連結，連結有效時間為 30 分鐘。\n"
    "4. 輸入新密碼兩次後按「確認」。",
    title="如何重設密碼",
    heading="重設密碼步驟",
    language="zh-hant",
)
# The second chunk of the same article (its password rules), to check that one article gets one number.
PASSWORD_RULES_ZH = article(
    "zh-password-reset",
    "新密碼長度至少 12 個字元，密碼須包含數字。",
    title="如何重設密碼",
    language="zh-hant",
    part=1,
    score=0.5,
)
LOCKED_ZH = article(
    "zh-account-locked",
    "連續輸入錯誤密碼 5 次，帳號會被鎖住 15 分鐘。鎖定時間結束後即可重新登入，或使用忘記密碼功能解鎖。",
    title="帳號被鎖住怎麼辦",
    heading="帳號鎖定",
    language="zh-hant",
)
PASSWORD_EN = article(
    "en-password-reset",
    "If you have forgotten your password, you can reset it yourself online.\n"
    "1. On the login page, select Forgot password.\n"
    "2. Enter your account ID and the email address linked to the account.\n"
    "3. Open the reset link in the email. The link is valid for 30 minutes.\n"
    "4. Enter your new password twice and select Confirm.",
    title="How do I reset my password",
    heading="Resetting your password",
    language="en",
)
ENROL_EN = article(
    "en-enrolment",
    "Open the course page and select Enrol. Enrolment closes 3 days before the course starts.",
    title="How to enrol in a course",
    heading="Enrolling",
    language="en",
)
FORM_HOURS = form(
    "F-101",
    "學習時數未正確登錄時，填寫時數補登申請表申請補登。",
    title="時數補登申請表",
    form_file="F-101.pdf",
)
FORM_ACCOUNT = form(
    "F-103",
    "變更帳號綁定的電子郵件或姓名時，填寫帳號資料變更申請表。",
    title="帳號資料變更申請表",
    form_file="F-103.docx",
)
CORPUS = (PASSWORD_ZH, LOCKED_ZH, PASSWORD_EN, ENROL_EN, FORM_HOURS, FORM_ACCOUNT)

# Chunks as the chunker cuts them from demo articles whose small sections were merged: the headings of the merged
# sections stay in the text as plain lines (no "#"), and only the main section's path is the chunk's heading.
WITHDRAWAL_FAQ_ZH = article(
    "zh-withdrawal",
    "未出席的影響\n"
    "錄取實體課程卻未出席、也未事先取消，會被記錄為「未到」。"
    "**6 個月內累計 2 次未到，將暫停實體課程報名權限 30 天**。\n"
    "\n"
    "常見問題\n"
    "\n"
    "退選會影響研習時數嗎？\n"
    "不會扣除已取得的時數。只有完成課程才會取得時數，退選的課程本來就不會產生時數。\n"
    "\n"
    "退選的課程還會出現在學習紀錄嗎？\n"
    "會顯示在「我的學習 > 歷史紀錄」，狀態為「已退選」，但不會出現在證書或時數報表中。",
    title="退選課程",
    heading="退選課程 > 未出席的影響",
    language="zh-hant",
    part=2,
)
REGISTRATION_EN = article(
    "en-registration",
    "Registration steps\n"
    "1. Select **Register** on the home page and tick to agree.\n"
    "2. Submit the form. We send a verification email. **The verification link is valid for 24 hours.**\n"
    "\n"
    "My verification link has expired\n"
    'Log in with your account ID and password. The page will say "Account not activated" and offer a '
    "**Resend verification email** button. You can resend up to 3 times per hour.\n"
    "\n"
    "Frequently asked questions\n"
    "\n"
    "Can I have two accounts?\n"
    "No. Each national ID number can be linked to only one account.",
    title="Creating a LearnHub Taiwan account",
    heading="Creating a LearnHub Taiwan account > Registration steps",
    language="en",
    part=1,
)
