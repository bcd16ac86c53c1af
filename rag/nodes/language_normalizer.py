"""language_normalizer: detect the question's language and bring Simplified Chinese to Traditional (Taiwan).

The corpus is Traditional Chinese and English; a Simplified question is converted with OpenCC `s2twp`, which
also swaps mainland for Taiwan vocabulary (软件 -> 軟體), so it matches the articles' own words.

With an LLM, a question in another language (Japanese, Vietnamese...) is translated into English for the
search (and, for a Chinese-only corpus, an English one into Traditional Chinese). `language` keeps the asker's
language, so the answer is still written in it. A failed translation keeps the question as asked and says so.
"""

from __future__ import annotations

import logging
import unicodedata
from typing import Any

from rag.deps import PipelineDeps, PromptProvider
from rag.engine import NodeType, ParamSpec
from rag.events import StatusPayload, StreamWriter
from rag.prompting import calls
from rag.prompting.followup import TARGET_NAMES
from rag.prompting.prompts import TRANSLATOR
from rag.state import PipelineState, Turn
from rag.text.language import (
    EN,
    OTHER,
    ZH_HANS,
    ZH_HANT,
    converter,
    detect_language,
    to_traditional,
    to_traditional_async,
)

logger = logging.getLogger(__name__)

NAME = "language_normalizer"
INPUTS = ("question", "history")
OUTPUTS = ("language", "normalized_question", "previous_answer")


class LanguageNormalizer:
    name = NAME

    def __init__(
        self,
        *,
        default_language: str,
        llm: Any = None,
        prompts: PromptProvider | None = None,
        translate_english: bool = False,
        translate_timeout: float = 8.0,
        max_chars: int = 2000,
    ) -> None:
        self._default_language = default_language
        self._llm = llm
        self._prompts = calls.prompt_provider(prompts)
        self._translate_english = translate_english
        self._translate_timeout = translate_timeout
        self._max_chars = max_chars
        # Load OpenCC's dictionaries now (~80 ms) rather than inside the first request.
        converter("s2twp")

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        question = " ".join(unicodedata.normalize("NFKC", state.question).split())
        language = detect_language(question, default=self._default_language)
        previous = _last_assistant_turn(state.history)
        if language == ZH_HANS:
            question = to_traditional(question)  # question-sized: cheaper inline than a thread hop
        if previous and detect_language(previous, default=self._default_language) == ZH_HANS:
            previous = await to_traditional_async(previous)
        state.language = language
        state.normalized_question = question
        state.previous_answer = previous
        target = self._translation_target(language)
        if self._llm is not None and target:
            translated = await self._translate(state, writer, question, target)
            if translated:
                state.normalized_question = translated
        return None

    def _translation_target(self, language: str) -> str:
        if language == OTHER:
            return EN
        if language == EN and self._translate_english:
            return ZH_HANT
        return ""

    async def _translate(self, state: PipelineState, writer: StreamWriter, question: str, target: str) -> str:
        """The question in `target`, or "" (and a status event saying why) when the model could not help."""
        try:
            snapshot = await calls.load_prompt(self._prompts, TRANSLATOR)
            system = calls.render(snapshot, TRANSLATOR, target_language=TARGET_NAMES[target])
            result = await self._llm.complete(
                backend=state.backend,
                node=NAME,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
                total_timeout=self._translate_timeout,
                **calls.call_options(self._llm, snapshot, node=NAME),
            )
        except calls.FALLBACK_ERRORS as exc:
            calls.log_fallback(NAME, exc)
            await self._announce(writer, state.language, target, reason=calls.fallback_reason(exc))
            return ""
        await calls.record_usage(state, writer, self.name, result.usage, call="translate")
        translated = " ".join(result.text.split())[: self._max_chars]
        if target == ZH_HANT and detect_language(translated, default=ZH_HANT) == ZH_HANS:
            translated = to_traditional(translated)
        if not translated:
            await self._announce(writer, state.language, target, reason="empty_output")
            return ""
        await self._announce(writer, state.language, target)
        return translated

    async def _announce(self, writer: StreamWriter, language: str, target: str, *, reason: str = "") -> None:
        payload: StatusPayload = {"source_language": language, "target_language": target, "translated": not reason}
        if reason:
            payload["fallback_reason"] = reason
        await writer.emit(self.name, "status", "translate", **payload)


def _last_assistant_turn(history: list[Turn]) -> str:
    for turn in reversed(history):
        if turn.role == "assistant":
            return turn.content.strip()
    return ""


def _build(deps: PipelineDeps, params: dict[str, Any]) -> LanguageNormalizer:
    return LanguageNormalizer(
        default_language=deps.config.default_language,
        llm=deps.llm,
        prompts=deps.prompts,
        translate_english=params["translate_english"],
        translate_timeout=params["translate_timeout"],
        max_chars=deps.config.max_question_chars,
    )


NODE_TYPE = NodeType(
    name=NAME,
    description={
        "en": "Detects the language (zh-hant, zh-hans, en, other) and converts Simplified Chinese to Traditional; "
        "with an LLM, translates questions in other languages for the search.",
        "zh-hant": "偵測語言（繁中、簡中、英文、其他），並將簡體中文轉為臺灣用語的繁體中文；"
        "設定語言模型時，將其他語言的問題翻譯後再檢索。",
    },
    inputs=INPUTS,
    outputs=OUTPUTS,
    factory=_build,
    params={
        "translate_english": ParamSpec(
            "bool", False, "With an LLM, also translate English questions into Traditional Chinese (Chinese corpus)"
        ),
        "translate_timeout": ParamSpec(
            "float", 8.0, "Seconds the translation may take before the question is kept as asked", minimum=0.1
        ),
    },
)
