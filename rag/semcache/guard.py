"""The cache key of a question, and the false-hit guard that vets a candidate above the similarity threshold.

A similarity threshold alone cannot tell "如何重設密碼" from "如何不重設密碼", "輸錯 5 次" from "輸錯 3 次", or
"download the certificate" from "verify the certificate": each pair differs by one feature among many shared ones,
and the lexical embedding (hashed n-grams, no meaning) scores them as near twins. A wrong cached answer is far
worse than a miss (the miss only costs the normal pipeline), so every candidate must also agree with the query on:

- numbers (Arabic, full-width, Chinese numerals before a measure word, English number words), as multisets;
- negation (不/沒/無/未/別/勿/非, not/no/never/n't/without/cannot/unable), as a count, after removing the A-not-A
  question form (能不能, 有沒有) and words where the character does not negate (無障礙, 不同, 是否);
- key terms: the question type when it is specific (how long, when, where, why, how many, who, which) and the
  domain concepts of a small lexicon (actions such as download/verify/reset/withdraw, objects such as
  certificate/password/hours), with synonyms mapped to one concept ("重設"/"重新設定"/"忘記密碼", "enrol"/"enroll");
- the rest of the content words (English stems, Chinese characters, after synonyms and filler such as 步驟,
  "steps", "please" are taken out): they must be the same on both sides. Letting one side add a word looked
  harmless ("用 App 可以...") until "my video won't play" matched "my video plays without sound".

Everything errs towards "different": a wrongly rejected paraphrase is a miss, nothing more. The lexicon is data
(`KeyTerms`), so a corpus outside the demo domain passes its own.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise

from rag.rules.terms import strip_question_words
from rag.text.tokenize import EN_STOPWORDS

# Reasons a candidate is rejected (also the keys of the per-reason counters in `SemanticCache.stats()`).
NUMBERS = "numbers"
NEGATION = "negation"
KEY_TERMS = "key_terms"
CONTENT = "content"
REASONS = (NUMBERS, NEGATION, KEY_TERMS, CONTENT)

_PUNCT_RE = re.compile(r"[\s\u3000]+|[^\w'\u2019+#.:-]+|(?<!\d)[.:](?!\d)|[.:]$")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'"})


def question_normalize(text: str) -> str:
    """The form a question is embedded and stored under: NFKC, lower case, one space, no punctuation around words.

    "如何重設密碼？" and "如何重設密碼" (or "How do I reset my password?" and "how do i reset my password") are the
    same key. Digits, decimal points and times ("08:30") are kept whole: they are what the number check compares.
    """
    text = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES).lower()
    return " ".join(_PUNCT_RE.sub(" ", text).split())


# --- numbers --------------------------------------------------------------------------------------------------

_ZH_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "兩": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000, "萬": 10_000, "万": 10_000}
# A Chinese numeral counts only before a measure word or after 第: 一 alone is in 一下, 一般, 一定, 統一.
_ZH_MEASURES = (
    "次|個|个|天|日|小時|小时|分鐘|分钟|週|周|星期|年|個月|个月|月|門|门|張|张|碼|码|位|人|歲|岁|點|点|堂|份|頁|页|"
    "筆|笔|台|臺|支|項|项|題|题|關|关|級|级|階段|阶段|步驟|步骤|步|種|种|封|則|则|倍|成|折|元|塊|块|秒"
)
_ZH_NUMBER_RE = re.compile(
    rf"第([零〇一二兩两三四五六七八九十百千萬万]+)|([零〇一二兩两三四五六七八九十百千萬万]+)(?={_ZH_MEASURES})"
)
_DIGITS_RE = re.compile(r"\d+(?:[.,]\d+)*")
_EN_NUMBERS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
    "sixty": 60, "ninety": 90, "hundred": 100, "once": 1, "twice": 2, "single": 1, "double": 2,
}  # fmt: skip
_EN_NUMBER_RE = re.compile(r"\b(" + "|".join(_EN_NUMBERS) + r")\b")


def _zh_numeral(text: str) -> int:
    """十五 -> 15, 二十 -> 20, 一百零五 -> 105, 三 -> 3 (good enough for the small numbers questions carry)."""
    total, current = 0, 0
    for char in text:
        if char in _ZH_DIGITS:
            current = _ZH_DIGITS[char]
        else:
            unit = _ZH_UNITS[char]
            total += (current or 1) * unit
            current = 0
    return total + current


def numbers(text: str) -> Counter[str]:
    """Every number of a normalised question, as canonical strings ("5", "1.5"), with repeats."""
    found: Counter[str] = Counter()
    for match in _DIGITS_RE.finditer(text):
        raw = match.group().replace(",", "")
        found[raw.lstrip("0") or "0" if "." not in raw else str(float(raw))] += 1
    for match in _ZH_NUMBER_RE.finditer(text):
        found[str(_zh_numeral(match.group(1) or match.group(2)))] += 1
    for match in _EN_NUMBER_RE.finditer(text):
        found[str(_EN_NUMBERS[match.group(1)])] += 1
    return found


# --- negation -------------------------------------------------------------------------------------------------

# A-not-A asks, it does not negate: 能不能, 有沒有, 是不是, 可不可以, 要不要.
_ZH_A_NOT_A_RE = re.compile(r"(.)[不沒没]\1")
# Words in which a negating character means something else (無障礙 = accessible, 不同 = different, 是否 = whether).
_ZH_NOT_NEGATION_RE = re.compile(
    "無障礙|无障碍|不同|不過|不过|不錯|不错|不少|不論|不论|不管|不僅|不仅|不但|不久|不斷|不断|差不多|"
    "是否|能否|可否|與否|与否|非常|除非|未來|未来|"
    "特別|特别|分別|分别|類別|类别|區別|区别|性別|性别|個別|个别|識別|识别|級別|级别|差別|差别|辨別|辨别|別人|别人|別的|别的"
)
_ZH_NEGATION_RE = re.compile(r"沒有|没有|沒辦法|没办法|無法|无法|[不沒没無无未別别勿非]")
_EN_NEGATION_RE = re.compile(r"\b(?:not|no|never|none|nobody|nothing|neither|nor|without|cannot|unable|[a-z]*n't)\b")


def negations(text: str) -> int:
    """How many negations a normalised question carries."""
    zh = _ZH_NOT_NEGATION_RE.sub(" ", _ZH_A_NOT_A_RE.sub(" ", text))
    return len(_ZH_NEGATION_RE.findall(zh)) + len(_EN_NEGATION_RE.findall(text))


# --- key terms ------------------------------------------------------------------------------------------------

# Question types whose answers differ from "how do I ...": asking how long or when is another question.
QUESTION_TYPES: dict[str, str] = {
    "?how_long": "多久|多長時間|多长时间|多長|多长|how long",
    "?when": "何時|何时|什麼時候|什么时候|幾點|几点|哪天|when",
    "?where": "哪裡|哪里|在哪|何處|何处|where",
    "?why": "為什麼|为什么|為何|为何|why",
    "?how_many": "多少|幾次|几次|幾個|几个|幾門|幾張|幾天|幾|几|how many|how much",
    "?who": "誰|谁|who|whom",
    "?which": "哪個|哪个|哪些|哪一|which",
    "?cost": "費用|费用|收費|收费|多少錢|免費|免费|付費|付费|cost|fee|fees|free|price|pay",
}

# Concepts of the demo help centre (LearnHub): actions and the things they act on, with their synonyms. Longer
# surface forms win over shorter ones inside them ("兩步驟驗證" is two-factor, not verify; "自然人憑證" is the
# citizen certificate, not a course certificate).
DEMO_CONCEPTS: dict[str, str] = {
    # actions
    "download": "下載|下载|download|downloading|downloaded|save a copy",
    "print": "列印|打印|印出|print|printing",
    "verify": "驗證真偽|查驗|真偽|驗證|验证|verify|verifying|verification|authenticity|genuine|fake|forged|偽造",
    "reissue": "補發|补发|重新核發|reissue|reissued|replacement|replace",
    "reset": "重設|重设|重置|重新設定|忘記|忘记|reset|resetting|forgot|forgotten|forget",
    "change": "變更|变更|更改|修改|更換|更换|更正|更新|change|changing|update|modify|edit|correct",
    "withdraw": "退選|退选|取消報名|取消报名|退出|withdraw|withdrawing|withdrawal|drop out|unenrol|unenroll",
    "cancel": "取消|cancel|cancellation|cancelling|canceling",
    "enrol": "報名|报名|選課|选课|enrol|enroll|enrolling|enrolment|enrollment|sign up for|take a course",
    "register": "註冊|注册|申請帳號|建立帳號|開帳號|register|registration|sign up|create an account|open an account",
    "login": "登入|登录|登陸|log in|login|logging in|sign in|signing in|log on",
    "unlock": "解鎖|解锁|解除鎖定|unlock|unlocking",
    "lock": "被鎖住|被鎖定|鎖定|锁定|鎖住|锁住|鎖|锁|locked|lock|locked out",
    "search": "搜尋|搜索|查詢課程|找課|search|searching|find a course|look for",
    "install": "安裝|安装|install|installing",
    "report": "上傳|上传|申報|申报|登錄時數|report|reported|reporting|upload|uploaded|transfer",
    "missing": "沒有出現|不見|消失|查不到|找不到|missing|disappeared|not showing|lost",
    "apply": "申請|申请|apply|application|request",
    "submit": "繳交|送出|寄回|提交|submit|send back|hand in",
    "play": "播放|play|playing|playback|plays",
    "watch": "觀看|收看|watch|watching|view",
    "contact": "聯絡|联络|聯繫|联系|客服|contact|customer service|support team|call|phone number",
    "merge": "合併|合并|merge|combine",
    "enable": "開啟|开启|啟用|启用|打開|打开|turn on|switch on|enable|activate|set up|setup",
    "disable": "關閉|关闭|停用|關掉|关掉|turn off|switch off|disable|deactivate|stop",
    "logout": "登出|log out|logout|sign out|log off",
    # objects
    "password": "密碼|密码|password|passwords",
    "account": "帳號|帐号|帳戶|账户|account|accounts",
    "email": "電子郵件信箱|電子郵件|电子邮件|信箱|郵件|邮件|email address|e-mail address|email|e-mail|mail|mailbox",
    "citizen_certificate": "自然人憑證|自然人凭证|憑證|凭证|citizen digital certificate|citizen certificate|moica",
    "certificate": "證書|证书|certificate|certificates|cert",
    "hours": "時數|时数|學習時數|研習時數|hours|hour|learning hours",
    "classroom": "實體|实体|混成|面授|classroom|in-person|in person|blended",
    "online": "線上|线上|網路課程|online|e-learning",
    "app": "app|應用程式|行動裝置|手機|手机|mobile|phone|android|ios|iphone",
    "notification": "通知|推播|notification|notifications|push|alerts|reminder",
    "offline": "離線|离线|offline",
    "video": "影片|视频|影音|video|videos",
    "caption": "字幕|caption|captions|subtitle|subtitles",
    "font": "字體|字体|字型|文字大小|font|text size|font size",
    "two_factor": "兩步驟驗證|两步骤验证|雙重驗證|二階段驗證|兩階段驗證|two-factor|two factor|2fa|two-step|two step",
    "form": "申請表|申请表|表單|表单|表格|form|forms",
    "privacy": "隱私|隐私|個人資料|个人资料|個資|privacy|personal data|personal information",
    "browser": "瀏覽器|浏览器|browser|browsers|chrome|firefox|safari|edge",
    "accessibility": "無障礙|无障碍|報讀|螢幕閱讀|accessibility|accessible|screen reader",
    "waiting_list": "候補|候补|waiting list|waitlist|wait list",
    "name": "姓名|名字|更名|改名|name|surname",
    "progress": "進度|进度|progress",
    "link": "連結|链接|link|url",
    "code": "驗證碼|验证码|qr code|code|pin",
    "course": "課程|课程|course|courses|class|classes",
    "no_show": "未到|缺席|未出席|no-show|no show|absent|absence",
}

# Words that carry no question of their own: "the steps to reset" asks what "reset" asks.
_EN_FILLER = EN_STOPWORDS | frozenset(
    "please help get got need want know tell about any some way ways possible would should could have has had was "
    "were am been being into out up steps step procedure process method instructions guide do does did done also "
    "just still again ever there their then than so too very really more most like okay ok hi hello thanks thank "
    "anyone someone something here able allowed let lets i'd i'll i've im going use using new my mine a an".split()
)
# Scaffolding the shared function-word list leaves half of ("怎麼樣" would leave "樣").
_ZH_SCAFFOLD_RE = re.compile("怎麼樣|怎么样|怎麼會|怎么会")
_ZH_FILLER_RE = re.compile(
    "步驟|步骤|流程|方法|方式|程序|說明|说明|問題|问题|請教|请教|處理|处理|操作|完成|進行|进行|知道|告訴|告诉|"
    "[要會会能被把在到是有就都也還还再請请讓让給给跟和與与及或嗎吗呢吧的了得著着個个下去來来自己裡里上中用]"
)
_EN_WORD_RE = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*")
_CJK_CHAR_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


@dataclass(frozen=True, slots=True)
class KeyTerms:
    """Surface forms -> concept. Chinese forms by one regex, longest first; English forms as whole words, longest
    phrase first, looked up by word sequence (a regex alternation of every English form cost 0.4 ms a question)."""

    cjk: re.Pattern[str] | None
    phrases: Mapping[tuple[str, ...], str]
    longest: int
    concept_of: Mapping[str, str]

    @classmethod
    def build(cls, *groups: Mapping[str, str | Iterable[str]]) -> KeyTerms:
        """From {concept: forms}, forms as an iterable or one string separated by "|"."""
        concept_of: dict[str, str] = {}
        for group in groups:
            for concept, forms in group.items():
                for form in forms.split("|") if isinstance(forms, str) else forms:
                    concept_of[question_normalize(form)] = concept
        cjk_forms = sorted((form for form in concept_of if not form.isascii()), key=len, reverse=True)
        phrases = {tuple(_EN_WORD_RE.findall(form)): concept for form, concept in concept_of.items() if form.isascii()}
        phrases.pop((), None)
        return cls(
            re.compile("|".join(map(re.escape, cjk_forms))) if cjk_forms else None,
            phrases,
            max(map(len, phrases), default=0),
            concept_of,
        )

    def split(self, text: str) -> tuple[frozenset[str], str]:
        """(concepts found, the text with them cut out)."""
        found: set[str] = set()

        def cut(match: re.Match[str]) -> str:
            found.add(self.concept_of[match.group()])
            return " "

        if self.cjk is not None:
            text = self.cjk.sub(cut, text)
        words = list(_EN_WORD_RE.finditer(text))
        spans: list[tuple[int, int]] = []
        i = 0
        while i < len(words):
            for n in range(min(self.longest, len(words) - i), 0, -1):
                run = words[i : i + n]
                concept = self.phrases.get(tuple(m.group() for m in run))
                # a phrase is its words side by side ("sign up for"), not spread over the question
                if concept is not None and all(a.end() + 1 == b.start() for a, b in pairwise(run)):
                    found.add(concept)
                    spans.append((run[0].start(), run[-1].end()))
                    i += n
                    break
            else:
                i += 1
        for start, stop in reversed(spans):
            text = f"{text[:start]} {text[stop:]}"
        return frozenset(found), text


DEFAULT_KEY_TERMS = KeyTerms.build(QUESTION_TYPES, DEMO_CONCEPTS)


@dataclass(frozen=True, slots=True)
class QuestionFeatures:
    """What the guard compares, computed once per question (stored questions keep theirs)."""

    numbers: Counter[str]
    negations: int
    concepts: frozenset[str]
    rest: frozenset[str]  # other content: English word stems, Chinese characters


def features(normalized: str, key_terms: KeyTerms = DEFAULT_KEY_TERMS) -> QuestionFeatures:
    """The guard's view of a question already passed through `question_normalize`."""
    # Numbers and negations are counted outside key terms: "two-factor" and "兩步驟驗證" hold no number, and
    # "無障礙" (accessible) or "沒有出現" (missing) no negation.
    concepts, rest_text = key_terms.split(normalized)
    counted_numbers, counted_negations = numbers(rest_text), negations(rest_text)
    rest_text = _DIGITS_RE.sub(" ", _EN_NUMBER_RE.sub(" ", _EN_NEGATION_RE.sub(" ", rest_text)))
    rest_text = _ZH_NUMBER_RE.sub(" ", rest_text)
    rest_text = _ZH_NEGATION_RE.sub(" ", _ZH_NOT_NEGATION_RE.sub(" ", _ZH_A_NOT_A_RE.sub(" ", rest_text)))
    rest_text = _ZH_FILLER_RE.sub(" ", strip_question_words(_ZH_SCAFFOLD_RE.sub(" ", rest_text)))
    rest: set[str] = {char for char in _CJK_CHAR_RE.findall(rest_text)}
    rest.update(word[:5] for word in _EN_WORD_RE.findall(rest_text) if word not in _EN_FILLER and len(word) > 1)
    return QuestionFeatures(counted_numbers, counted_negations, concepts, frozenset(rest))


def disagreement(query: QuestionFeatures, candidate: QuestionFeatures) -> str | None:
    """Why the candidate's answer must not be served for the query (one of REASONS), or None when they agree."""
    if query.numbers != candidate.numbers:
        return NUMBERS
    if query.negations != candidate.negations:
        return NEGATION
    if query.concepts != candidate.concepts:
        return KEY_TERMS
    if query.rest != candidate.rest:
        return CONTENT
    return None
