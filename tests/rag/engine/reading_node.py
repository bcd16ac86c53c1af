"""A node module for tests/rag/engine/test_reads.py: it reads `queries` and `error`, and writes `answer`."""

from __future__ import annotations

from typing import Any

from rag.state import PipelineState


class ReadingNode:
    async def run(self, state: PipelineState, writer: Any) -> str:
        if state.error is None:
            state.answer = " ".join(state.queries)
        state.fail("x", "y") if not state.answer else None  # a method, not a field
        return "default"


def build(deps: Any, params: dict[str, Any]) -> ReadingNode:
    return ReadingNode()
