"""telemetry: the seam where a sampled Langfuse trace update will go; a pass-through until then.

It runs last on every path, so it must stay cheap: when it does send, it will hand the trace to a background
exporter rather than wait on the network here.
"""

from __future__ import annotations

from typing import Any

from rag.deps import PipelineDeps
from rag.engine import NodeType
from rag.events import StreamWriter
from rag.state import PipelineState

NAME = "telemetry"
INPUTS = ()
OUTPUTS = ()


class Telemetry:
    name = NAME

    def __init__(self, *, telemetry: Any = None) -> None:
        self._telemetry = telemetry

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        if self._telemetry is not None:
            self._telemetry.finish(state)  # hands the record to the exporter's queue; never waits
        return None


def _build(deps: PipelineDeps, params: dict[str, Any]) -> Telemetry:
    return Telemetry(telemetry=deps.telemetry)


NODE_TYPE = NodeType(
    name=NAME,
    description={
        "en": "Records the request's trace (sampled) when telemetry is configured; otherwise does nothing.",
        "zh-hant": "設定遙測時記錄請求的追蹤資料（抽樣）；未設定時不做任何事。",
    },
    inputs=INPUTS,
    outputs=OUTPUTS,
    factory=_build,
)
