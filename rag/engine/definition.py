"""Workflow definitions: plain data, JSON in and out, hashed for the compiled-graph cache."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

END = "END"
DEFAULT_ROUTE = "default"


@dataclass(frozen=True, slots=True)
class NodeSpec:
    id: str
    type: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EdgeSpec:
    source: str
    target: str
    route: str = DEFAULT_ROUTE
    # A bound on how often this edge may be taken in one run: every cycle needs one.
    max_visits: int | None = None


@dataclass(frozen=True, slots=True)
class WorkflowDefinition:
    name: str
    entry: str
    nodes: tuple[NodeSpec, ...]
    edges: tuple[EdgeSpec, ...]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkflowDefinition:
        """Parse a definition; shape errors raise ValueError naming the field."""
        if not isinstance(data, dict):
            raise ValueError("workflow must be a JSON object")
        name = data.get("name", "workflow")
        entry = data.get("entry")
        nodes_raw = data.get("nodes")
        edges_raw = data.get("edges")
        if not isinstance(entry, str) or not entry:
            raise ValueError("workflow.entry must be a node id")
        if not isinstance(nodes_raw, list) or not nodes_raw:
            raise ValueError("workflow.nodes must be a non-empty list")
        if not isinstance(edges_raw, list):
            raise ValueError("workflow.edges must be a list")
        nodes = []
        for i, raw in enumerate(nodes_raw):
            if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or not isinstance(raw.get("type"), str):
                raise ValueError(f"workflow.nodes[{i}] needs string 'id' and 'type'")
            params = raw.get("params") or {}
            if not isinstance(params, dict):
                raise ValueError(f"workflow.nodes[{i}].params must be an object")
            nodes.append(NodeSpec(id=raw["id"], type=raw["type"], params=params))
        edges = []
        for i, raw in enumerate(edges_raw):
            if (
                not isinstance(raw, dict)
                or not isinstance(raw.get("source"), str)
                or not isinstance(raw.get("target"), str)
            ):
                raise ValueError(f"workflow.edges[{i}] needs string 'source' and 'target'")
            route = raw.get("route") or DEFAULT_ROUTE
            max_visits = raw.get("max_visits")
            if max_visits is not None and (not isinstance(max_visits, int) or max_visits < 1):
                raise ValueError(f"workflow.edges[{i}].max_visits must be a positive integer")
            edges.append(EdgeSpec(source=raw["source"], target=raw["target"], route=str(route), max_visits=max_visits))
        return cls(name=str(name), entry=entry, nodes=tuple(nodes), edges=tuple(edges))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "entry": self.entry,
            "nodes": [{"id": n.id, "type": n.type, "params": dict(n.params)} for n in self.nodes],
            "edges": [
                {"source": e.source, "target": e.target, "route": e.route}
                | ({"max_visits": e.max_visits} if e.max_visits is not None else {})
                for e in self.edges
            ],
        }

    def fingerprint(self, extra: Any = None) -> str:
        """A stable hash of the definition and any compile-time parameters."""
        blob = json.dumps([self.to_dict(), extra], sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()
