"""telemetry: the end of every path of a workflow; a pass-through.

The request's trace is finished in one place, by the run itself (rag.runtime.PipelineRun), so that answered,
failed and cancelled runs are all recorded whether or not their graph reached this node. The node stays so that
saved and published workflows, which end with it, keep loading.
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

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        return None


def _build(deps: PipelineDeps, params: dict[str, Any]) -> Telemetry:
    return Telemetry()


NODE_TYPE = NodeType(
    name=NAME,
    description={
        "en": "Marks the end of the workflow; the request's trace (sampled) is recorded by the run itself.",
        "zh-hant": "標示流程的結尾；請求的追蹤資料（抽樣）由執行本身記錄。",
    },
    inputs=INPUTS,
    outputs=OUTPUTS,
    factory=_build,
)
