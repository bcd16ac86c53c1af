"""What a follow-up transform needs from the model, if anything.

Converting between Traditional and Simplified Chinese is exact offline (OpenCC), so it stays offline even with
a model. Translating between English and Chinese goes to the translator prompt; every other instruction
(summarise, shorten, "explain step 2") is a rewrite of the previous answer by the answer prompt, with the
previous answer's cited sentences as its sources.
"""

from __future__ import annotations

from dataclasses import dataclass

from rag.rules import followup
from rag.rules.transforms import split_answer
from rag.text.language import EN, ZH_HANS, ZH_HANT, detect_language

SCRIPT = "script"
TRANSLATE = "translate"
REWRITE = "rewrite"

_CANONICAL = frozenset(
    {
        followup.SUMMARIZE,
        followup.SHORTEN,
        followup.ELABORATE,
        followup.TRANSLATE_EN,
        followup.TRANSLATE_ZH_HANT,
        followup.TRANSLATE_ZH_HANS,
        followup.TRANSLATE_OTHER,
    }
)
# The translator prompt's {{target_language}}.
TARGET_NAMES = {
    EN: "English",
    ZH_HANT: "Traditional Chinese as used in Taiwan (繁體中文)",
    ZH_HANS: "Simplified Chinese (简体中文)",
}


@dataclass(frozen=True, slots=True)
class FollowupMode:
    kind: str  # SCRIPT | TRANSLATE | REWRITE
    target_language: str = ""  # for TRANSLATE: en | zh-hant | zh-hans


def canonical_instruction(instruction: str) -> str:
    """SUMMARIZE, TRANSLATE_EN...: the offline name of an instruction, whether given so or as a sentence."""
    if instruction in _CANONICAL:
        return instruction
    return followup.transform_instruction(instruction) if instruction else ""


def followup_mode(instruction: str, previous_answer: str) -> FollowupMode:
    canonical = canonical_instruction(instruction)
    body, _ = split_answer(previous_answer)
    answer_is_english = detect_language(body, default=ZH_HANT) == EN
    if canonical in (followup.TRANSLATE_ZH_HANT, followup.TRANSLATE_ZH_HANS):
        if not answer_is_english:
            return FollowupMode(SCRIPT)
        return FollowupMode(TRANSLATE, ZH_HANS if canonical == followup.TRANSLATE_ZH_HANS else ZH_HANT)
    if canonical == followup.TRANSLATE_EN:
        return FollowupMode(TRANSLATE, EN)
    if canonical == followup.TRANSLATE_OTHER:
        return FollowupMode(TRANSLATE, ZH_HANT if answer_is_english else EN)
    return FollowupMode(REWRITE)
