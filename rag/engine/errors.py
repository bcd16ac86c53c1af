from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WorkflowProblem:
    """One thing wrong with a workflow; `node` names where to show it (empty for the whole graph)."""

    code: str  # unknown_node_type, unknown_node, missing_route, unknown_route, unreachable, unbounded_loop, ...
    message: str
    node: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message, "node": self.node}


class WorkflowError(ValueError):
    def __init__(self, problems: list[WorkflowProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(p.message for p in problems))


class LoopLimitExceeded(RuntimeError):
    """A bounded edge was taken more often than its bound allows (a node kept asking to loop)."""
