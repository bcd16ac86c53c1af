"""What the LLM backend hands back to pipeline nodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rag.state import Usage

__all__ = ["DeltaKind", "LLMDelta", "LLMResult"]

DeltaKind = Literal["answer", "reasoning", "usage"]


@dataclass(frozen=True, slots=True)
class LLMDelta:
    """One piece of a streamed answer.

    ``answer`` and ``reasoning`` carry ``text`` (emit them on the matching event channel); ``usage`` comes once,
    after the last text delta, with the call's token counts in ``usage`` (emit it as a ``meta`` usage event).
    """

    kind: DeltaKind
    text: str = ""
    usage: Usage | None = None


@dataclass(slots=True)
class LLMResult:
    """A non-streaming completion: the text, its token usage and, with an output model, the reply parsed into it
    (a rag.llm.structured.StructuredOutput)."""

    text: str
    usage: Usage = field(default_factory=Usage)
    parsed: Any = None
