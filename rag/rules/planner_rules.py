"""Offline intent rules: bilingual keyword patterns standing in for the LLM planner.

Out-of-scope is decided conservatively: a question is only turned away when it names an unrelated topic AND
says nothing that could be about the platform; anything in between goes to retrieval, where an honest
"not found" is a better failure than refusing a real question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rag.rules.followup import ELABORATE, transform_instruction
from rag.text.tokenize import normalize

SIMPLE_FAQ = "simple_faq"
FORM_DOWNLOAD = "form_download"
FORM_EXPORT = "form_export"
CONVERSATION_FOLLOWUP = "conversation_followup"
OUT_OF_SCOPE = "out_of_scope"
FORM_INTENTS = frozenset({FORM_DOWNLOAD, FORM_EXPORT})

ROUTE_RETRIEVE = "retrieve"
ROUTE_FOLLOWUP = "followup"
ROUTE_DIRECT = "direct"

_FORM_EXPORT_RE = re.compile(
    r"匯出|汇出|導出|导出|表單清單|表单清单|表單列表|表单列表|所有表單|所有表单|全部表單|全部表单|清單|清单|"
    r"\bexport\b|\bcsv\b|\bspreadsheet\b|\bexcel\b|\blist (?:of|all) (?:the )?forms\b|\ball (?:the )?forms\b"
)
_FORM_DOWNLOAD_RE = re.compile(
    r"申請表|申请表|表單|表单|表格|下載.{0,8}表|下载.{0,8}表|空白表|紙本表|纸本表|"
    r"\b(?:application|download|downloadable|paper|blank|pdf|request) forms?\b|\bforms?\b"
)
_FORM_WORD_RE = re.compile(r"表單|表单|表格|申請表|申请表|\bforms?\b")
# "the login form does not load" is about a web page, not a downloadable form.
_WEB_FORM_RE = re.compile(r"\b(?:log-?in|sign-?in|sign-?up|web|online|search|contact) forms?\b|登入表單|登录表单")
_OFF_TOPIC_RE = re.compile(
    r"天氣|天气|氣溫|气温|下雨|颱風|台风|股價|股价|股票|股市|匯率|汇率|比特幣|比特币|笑話|笑话|彩券|樂透|乐透|星座|運勢|运势|"
    r"食譜|食谱|餐廳|餐厅|電影|电影|球賽|球赛|比分|八卦|明星|總統大選|选举|選舉|"
    r"\b(?:weather|forecast|temperature|stocks?|stock prices?|share prices?|exchange rate|bitcoin|crypto|jokes?|"
    r"lottery|horoscope|zodiac|recipes?|restaurants?|movies?|football|soccer|nba|baseball|celebrity|election)\b"
)
# Anything that could be about the platform keeps a question in scope even if it also names an unrelated topic.
_PLATFORM_RE = re.compile(
    r"帳號|帐号|帳戶|密碼|密码|登入|登录|註冊|注册|課程|课程|報名|报名|學習|学习|證書|证书|時數|时数|平台|網站|网站|"
    r"表單|表单|申請|申请|驗證|验证|憑證|凭证|信箱|影片|app|系統|系统|客服|退選|退选|候補|候补|上課|上课|"
    r"\b(?:account|password|log ?in|login|sign ?in|register|registration|course|courses|class|enrol|enroll|"
    r"enrolment|enrollment|certificate|hours|learning|platform|site|website|app|email|verification|"
    r"two-factor|2fa|form|forms|withdraw|withdrawal|waiting list|video|browser)\b"
)


@dataclass(frozen=True, slots=True)
class OfflinePlan:
    intent: str
    should_retrieve: bool
    followup_instruction: str
    route: str


def plan_offline(question: str, *, previous_answer: str) -> OfflinePlan:
    """Intent, retrieval decision and follow-up instruction for a normalised question."""
    text = normalize(question)
    if previous_answer and (instruction := transform_instruction(question)):
        if instruction == ELABORATE:
            # Expanding needs more material than the previous answer holds: retrieve again for the earlier
            # question (the query builder uses it) and answer at more length.
            return OfflinePlan(CONVERSATION_FOLLOWUP, True, instruction, ROUTE_RETRIEVE)
        return OfflinePlan(CONVERSATION_FOLLOWUP, False, instruction, ROUTE_FOLLOWUP)
    # Exporting is about forms only when forms are named: "匯出我的學習時數紀錄" asks about learning records.
    if _FORM_EXPORT_RE.search(text) and _FORM_WORD_RE.search(text):
        return OfflinePlan(FORM_EXPORT, True, "", ROUTE_RETRIEVE)
    if _FORM_DOWNLOAD_RE.search(text) and not _WEB_FORM_RE.search(text):
        return OfflinePlan(FORM_DOWNLOAD, True, "", ROUTE_RETRIEVE)
    if _OFF_TOPIC_RE.search(text) and not _PLATFORM_RE.search(text):
        return OfflinePlan(OUT_OF_SCOPE, False, "", ROUTE_DIRECT)
    return OfflinePlan(SIMPLE_FAQ, True, "", ROUTE_RETRIEVE)
