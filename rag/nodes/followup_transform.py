"""followup_transform: answer "shorter", "summarise", "用簡體" from the previous answer, without retrieval.

The transformed text goes to `state.answer`; response_synth streams it (it alone owns the answer channel).

With an LLM, what needs a model (English <-> Chinese, summaries, shortening, free-form instructions) is left
for response_synth to generate and stream token by token: this node prepares the material, the previous
answer's sources and its cited sentences as `retrieved` chunks, and leaves `answer` empty. Converting between
Traditional and Simplified Chinese stays offline either way: OpenCC is exact and instant.
"""

from __future__ import annotations

from typing import Any

from rag.deps import PipelineDeps
from rag.engine import NodeType, ParamSpec
from rag.events import StreamWriter
from rag.prompting.followup import SCRIPT, followup_mode
from rag.prompting.sources import previous_answer_chunks
from rag.rules.transforms import previous_question, split_answer, transform_previous_answer
from rag.state import PipelineState

NAME = "followup_transform"
INPUTS = ("previous_answer", "followup_instruction", "language", "history")
OUTPUTS = ("answer", "sources", "retrieved")


class FollowupTransform:
    name = NAME

    def __init__(self, *, summary_chars: int, shorten_chars: int, llm: Any = None) -> None:
        self._summary_chars = summary_chars
        self._shorten_chars = shorten_chars
        self._llm = llm

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        if self._llm is not None and state.previous_answer.strip():
            mode = followup_mode(state.followup_instruction, state.previous_answer)
            if mode.kind != SCRIPT:
                body, sources = split_answer(state.previous_answer)
                state.answer = ""
                state.sources = sources
                state.retrieved = previous_answer_chunks(body, sources, language=state.language)
                await writer.emit(self.name, "status", "prepare", mode=mode.kind, target_language=mode.target_language)
                return None
        result = await transform_previous_answer(
            state.previous_answer,
            state.followup_instruction,
            language=state.language,
            summary_chars=self._summary_chars,
            shorten_chars=self._shorten_chars,
            previous_question=previous_question(state.history),
        )
        state.answer = result.text
        state.sources = result.sources
        return None


def _build(deps: PipelineDeps, params: dict[str, Any]) -> FollowupTransform:
    return FollowupTransform(summary_chars=params["summary_chars"], shorten_chars=params["shorten_chars"], llm=deps.llm)


NODE_TYPE = NodeType(
    name=NAME,
    description={
        "en": "Transforms the previous answer (summarise, shorten, Simplified/Traditional Chinese) without retrieval; "
        "with an LLM, prepares translations and rewrites for response_synth to stream.",
        "zh-hant": "不重新檢索，直接改寫上一則回答（摘要、精簡、繁簡轉換）；設定語言模型時，"
        "準備翻譯與改寫的材料，交由 response_synth 串流產生。",
    },
    inputs=INPUTS,
    outputs=OUTPUTS,
    factory=_build,
    params={
        "summary_chars": ParamSpec("int", 200, "Longest summary, in characters (whole sentences)", minimum=20),
        "shorten_chars": ParamSpec("int", 400, "Longest shortened answer, in characters", minimum=20),
    },
)
