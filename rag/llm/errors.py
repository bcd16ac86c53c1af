"""Errors of the LLM package that are not pipeline terminal errors.

Transport failures surface as rag.errors.UpstreamError / UpstreamTimeout / Busy, which end the stream with the
matching terminal event. Bad model *output* is different: the caller has a rule-based fallback, so it gets an
ordinary exception it is expected to catch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rag.state import Usage

__all__ = ["InvalidLLMOutput"]


class InvalidLLMOutput(ValueError):
    """The model answered, but not with JSON matching the requested schema; ``reason`` says where and why."""

    def __init__(self, reason: str, *, text: str = "") -> None:
        super().__init__(f"invalid LLM output: {reason}")
        self.reason = reason
        # The raw output, for a DEBUG log or a test; never logged at INFO (it may quote the user's question).
        self.text = text
        # The tokens the call spent (set by LLMBackend.complete): a rejected answer was still paid for.
        self.usage: Usage | None = None
