"""Questions about the demo help centre, written to choose and check the semantic cache's threshold.

Each case is a question as first asked (and cached), ways of asking the same thing that should be answered from
the cache, and questions worded almost the same that ask something else and must never get its answer. The
threshold sweep in scripts/bench_cache_hit.py and tests/rag/semcache/test_paraphrases.py read this.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Case:
    language: str
    stored: str
    same: tuple[str, ...]  # paraphrases: a hit is welcome
    different: tuple[str, ...]  # near misses: a hit is a wrong answer


CASES: tuple[Case, ...] = (
    # --- Traditional Chinese ---------------------------------------------------------------------------------
    Case(
        "zh-hant",
        "如何重設密碼？",
        ("密碼要怎麼重設", "請問如何重設密碼", "重設密碼的步驟", "我要怎麼重新設定密碼", "怎麼重設密碼？"),
        ("如何不重設密碼", "重設密碼的連結有效多久", "如何重設兩步驟驗證", "如何變更密碼", "為什麼無法重設密碼"),
    ),
    Case(
        "zh-hant",
        "帳號被鎖住怎麼辦",
        ("我的帳號被鎖住了怎麼辦", "帳號被鎖住了要怎麼處理", "請問帳號被鎖住怎麼辦？"),
        ("帳號被鎖住多久", "帳號沒有被鎖住卻無法登入", "為什麼帳號被鎖住", "帳號被鎖住會影響時數嗎"),
    ),
    Case(
        "zh-hant",
        "密碼輸錯 5 次會怎樣",
        ("密碼輸錯五次會怎樣", "密碼輸錯5次會怎麼樣"),
        ("密碼輸錯 3 次會怎樣", "密碼輸錯 10 次會怎樣", "驗證碼輸錯 5 次會怎樣"),
    ),
    Case(
        "zh-hant",
        "如何下載學習證書",
        ("學習證書要怎麼下載", "請問學習證書如何下載", "我要下載學習證書"),
        ("如何驗證學習證書", "如何補發學習證書", "學習證書無法下載", "如何列印學習證書", "用手機如何下載學習證書"),
    ),
    Case(
        "zh-hant",
        "如何驗證證書真偽",
        ("證書真偽要怎麼驗證", "請問如何驗證證書的真偽"),
        ("如何下載證書", "證書驗證碼在哪裡", "證書驗證服務提供多久"),
    ),
    Case(
        "zh-hant",
        "如何報名實體課程",
        ("實體課程要怎麼報名", "請問實體課程如何報名", "我想報名實體課程"),
        ("如何退選實體課程", "如何報名線上課程", "實體課程報名截止日是什麼時候", "如何取消報名實體課程"),
    ),
    Case(
        "zh-hant",
        "線上課程可以隨時退選嗎",
        ("線上課程能不能隨時退選", "線上課程是否可以隨時退選"),
        ("線上課程不可以隨時退選嗎", "實體課程可以隨時退選嗎", "線上課程可以隨時報名嗎"),
    ),
    Case(
        "zh-hant",
        "研習時數沒有出現怎麼辦",
        ("我的研習時數沒有出現", "研習時數沒有出現要怎麼處理"),
        ("研習時數何時上傳", "研習時數如何計算", "研習時數補登申請表在哪裡下載"),
    ),
    Case(
        "zh-hant",
        "如何變更電子郵件信箱",
        ("電子郵件信箱要怎麼變更", "請問如何變更電子郵件信箱"),
        ("如何變更姓名", "收不到電子郵件怎麼辦", "如何變更密碼"),
    ),
    Case(
        "zh-hant",
        "如何設定兩步驟驗證",
        ("兩步驟驗證要怎麼設定", "請問如何設定兩步驟驗證"),
        ("如何關閉兩步驟驗證", "如何驗證證書", "兩步驟驗證碼輸錯怎麼辦"),
    ),
    Case(
        "zh-hant",
        "App 可以離線觀看課程嗎",
        ("App 能不能離線觀看課程", "用 App 可以離線觀看課程嗎？"),
        ("App 離線觀看的課程會計算時數嗎", "電腦可以離線觀看課程嗎", "App 可以離線觀看幾天"),
    ),
    Case(
        "zh-hant",
        "影片無法播放怎麼辦",
        ("影片不能播放怎麼辦", "影片無法播放要怎麼處理"),
        ("影片進度沒有記錄怎麼辦", "影片字幕無法顯示怎麼辦", "影片可以播放嗎"),
    ),
    # --- English ---------------------------------------------------------------------------------------------
    Case(
        "en",
        "How do I reset my password?",
        ("how can I reset my password", "How to reset my password", "What are the steps to reset my password?"),
        ("How do I change my password?", "How long is the password reset link valid?", "How do I reset two-factor"),
    ),
    Case(
        "en",
        "What happens if I enter the wrong password 5 times?",
        ("What happens if I enter the wrong password five times?",),
        ("What happens if I enter the wrong password 3 times?", "What happens if I enter the wrong code 5 times?"),
    ),
    Case(
        "en",
        "How do I download the certificate?",
        ("How can I download the certificate?", "How to download the certificate", "Steps to download the certificate"),
        (
            "How do I verify the certificate?",
            "How do I print the certificate?",
            "Why can't I download the certificate?",
        ),
    ),
    Case(
        "en",
        "Can I withdraw from an online course?",
        ("Is it possible to withdraw from an online course?", "Can I withdraw from online courses?"),
        (
            "Can't I withdraw from an online course?",
            "Can I withdraw from a classroom course?",
            "Can I enrol in an online course?",
        ),
    ),
    Case(
        "en",
        "How do I enrol in a classroom course?",
        ("How can I enroll in a classroom course?", "How to enrol in a classroom course"),
        ("How do I withdraw from a classroom course?", "When does enrolment for a classroom course close?"),
    ),
    Case(
        "en",
        "My learning hours are missing",
        ("my learning hours are missing, what should I do?", "Learning hours missing"),
        ("When are my learning hours reported?", "How are learning hours counted?"),
    ),
    Case(
        "en",
        "How do I change my email address?",
        ("How can I change my email address?", "How to change my email address"),
        ("How do I change my name?", "I can't receive email", "How do I change my password?"),
    ),
    Case(
        "en",
        "Can I log in with a citizen digital certificate?",
        (
            "Is it possible to log in with a citizen digital certificate?",
            "Can I login with the citizen digital certificate",
        ),
        ("Can I download a certificate?", "Can I log in without a citizen digital certificate?"),
    ),
    Case(
        "en",
        "How do I turn on app notifications?",
        ("How can I turn on app notifications?", "How to turn on notifications in the app"),
        ("How do I turn off app notifications?", "How do I install the app?"),
    ),
)

# Questions about nothing any case is about: never a hit whatever is stored.
UNRELATED: tuple[tuple[str, str], ...] = (
    ("zh-hant", "今天天氣如何"),
    ("zh-hant", "學習e站的客服電話是多少"),
    ("zh-hant", "瀏覽器需要什麼版本"),
    ("en", "What's the weather like today?"),
    ("en", "What are your service hours?"),
    ("en", "Is there a discount for students?"),
)

# Written after the guard and the threshold were chosen on CASES, and not tuned on since: the figures measured
# on these estimate how the choice carries over to questions it was not fitted to.
HELD_OUT: tuple[Case, ...] = (
    Case(
        "zh-hant",
        "證書遺失了怎麼辦",
        ("我的證書遺失了怎麼辦", "證書遺失要怎麼處理"),
        ("證書姓名錯誤怎麼辦", "證書沒有遺失卻無法開啟"),
    ),
    Case(
        "zh-hant",
        "如何註冊學習e站帳號",
        ("學習e站帳號要怎麼註冊", "請問如何註冊學習e站的帳號", "我想註冊學習e站帳號"),
        ("如何刪除學習e站帳號", "如何登入學習e站帳號", "註冊學習e站帳號需要多久"),
    ),
    Case(
        "zh-hant",
        "同時可以選幾門線上課程",
        ("同時最多可以選幾門線上課程",),
        ("同時可以選幾門實體課程", "同時可以選 20 門線上課程嗎"),
    ),
    Case(
        "zh-hant",
        "候補名單要等多久",
        ("候補名單需要等多久",),
        ("如何加入候補名單", "如何取消候補"),
    ),
    Case(
        "zh-hant",
        "如何調整字幕大小",
        ("字幕大小要怎麼調整", "請問如何調整字幕的大小"),
        ("如何關閉字幕", "如何調整影片播放速度"),
    ),
    Case(
        "zh-hant",
        "收不到重設密碼的信件怎麼辦",
        ("重設密碼的信件收不到怎麼辦", "我收不到重設密碼的信件"),
        ("收得到重設密碼的信件但連結失效", "收不到報名確認信怎麼辦"),
    ),
    Case(
        "en",
        "How do I request a certificate reissue?",
        ("How can I request a certificate reissue?", "How to request a certificate reissue"),
        ("How do I request a certificate verification?", "How long does a certificate reissue take?"),
    ),
    Case(
        "en",
        "Which browsers are supported?",
        ("What browsers are supported?", "Which browsers do you support?"),
        ("Which mobile devices are supported?", "Which browsers are not supported?"),
    ),
    Case(
        "en",
        "How do I join the waiting list?",
        ("How can I join the waiting list?", "How to join a waiting list"),
        ("How do I leave the waiting list?", "How long is the waiting list?"),
    ),
    Case(
        "en",
        "Can I watch courses offline on my phone?",
        ("Is it possible to watch courses offline on my phone?", "Can I watch courses offline on the phone?"),
        ("Can I watch courses offline on my computer?", "Can I download courses on my phone?"),
    ),
    Case(
        "en",
        "How do I set up two-factor authentication?",
        ("How can I set up two-factor authentication?", "How to set up two-factor authentication"),
        ("How do I turn off two-factor authentication?", "I lost my two-factor device"),
    ),
    Case(
        "en",
        "What should I do if my video won't play?",
        ("What should I do if the video won't play?", "my video won't play, what should I do?"),
        ("What should I do if my video won't load captions?", "What should I do if my video plays without sound?"),
    ),
)

# Near misses of one case that ask what another case's stored question asks: with every case cached together,
# answering them from that other entry is right (noticed when the whole set was first run through one cache).
EQUIVALENT: dict[str, str] = {
    "如何驗證證書": "如何驗證證書真偽",
    "如何下載證書": "如何下載學習證書",
    "Can I download a certificate?": "How do I download the certificate?",
}


def acceptable(asked: str, served_for: str, case: Case) -> bool:
    """Whether serving the answer cached for `served_for` to `asked` (from `case`) is right."""
    return (asked in case.same and served_for == case.stored) or EQUIVALENT.get(asked) == served_for
