"""Graph JSON as staff edit it: shape limits, the node catalogue, and the engine's own checks on a draft.

A draft may be unfinished (no nodes yet, no entry), so a graph is stored whenever it is JSON of the right
shape and size; whether it can run is a list of problems from the engine, each naming its node.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from rag.deps import PipelineDeps
from rag.engine import END, NodeRegistry, WorkflowDefinition, WorkflowError, WorkflowProblem, compile_workflow
from rag.engine import validate_workflow as engine_validate

MAX_GRAPH_BYTES = 256 * 1024
MAX_NODES = 200
MAX_EDGES = 1000
LAYOUT_KEY = "layout"  # canvas positions {node_id: [x, y]}; the engine ignores the key

END_NODE: dict[str, Any] = {
    "name": END,
    "description": {
        "en": "The end of the graph: the run finishes and the stream's summary event is sent.",
        "zh-hant": "流程終點：執行結束並送出串流的摘要事件。",
    },
    "inputs": [],
    "optional_inputs": [],
    "outputs": [],
    "routes": [],
    "params": {},
}


class GraphShapeError(ValueError):
    """The graph is not a JSON object of the expected shape or is too large; the message says which."""


@functools.cache
def node_registry() -> NodeRegistry:
    """The catalogue the runtime compiles against, built once per process (node types are static)."""
    # Imported here: the nodes load the openai SDK (~1 s), which `manage.py ask --help` and the admin never need.
    from rag.nodes import build_registry

    return build_registry()


def node_catalogue() -> dict[str, Any]:
    registry = node_registry()
    node_types = registry.catalogue()
    return {
        "nodes": node_types,
        "routes": sorted({route for node_type in node_types for route in node_type["routes"]}),
        "end": END_NODE,
    }


def graph_clean(graph: Any) -> dict[str, Any]:
    """The graph as it may be stored: a JSON object with list-valued `nodes`/`edges`, within the size limits."""
    if not isinstance(graph, dict):
        raise GraphShapeError("'graph' must be a JSON object")
    for key in ("nodes", "edges"):
        if key in graph and not isinstance(graph[key], list):
            raise GraphShapeError(f"'graph.{key}' must be a list")
    if len(graph.get("nodes") or ()) > MAX_NODES:
        raise GraphShapeError(f"a workflow has at most {MAX_NODES} nodes")
    if len(graph.get("edges") or ()) > MAX_EDGES:
        raise GraphShapeError(f"a workflow has at most {MAX_EDGES} edges")
    if LAYOUT_KEY in graph and not isinstance(graph[LAYOUT_KEY], dict):
        raise GraphShapeError(f"'graph.{LAYOUT_KEY}' must be an object")
    try:
        size = len(json.dumps(graph, ensure_ascii=False, allow_nan=False).encode())
    except (TypeError, ValueError) as exc:
        raise GraphShapeError(f"'graph' is not plain JSON: {exc}") from None
    if size > MAX_GRAPH_BYTES:
        raise GraphShapeError(f"'graph' is {size} bytes; the limit is {MAX_GRAPH_BYTES}")
    return graph


@dataclass(frozen=True, slots=True)
class GraphCheck:
    definition: WorkflowDefinition | None
    problems: list[dict[str, str]]

    @property
    def valid(self) -> bool:
        return self.definition is not None and not self.problems


def graph_check(graph: dict[str, Any], *, registry: NodeRegistry | None = None) -> GraphCheck:
    """Parse, validate and trial-compile a graph with the engine; every problem names its node when it has one."""
    registry = registry or node_registry()
    try:
        definition = WorkflowDefinition.from_dict(graph)
    except ValueError as exc:
        return GraphCheck(None, [WorkflowProblem("bad_shape", str(exc)).as_dict()])
    problems = engine_validate(definition, registry)
    if not problems:
        problems = _compile_problems(definition, registry)
    return GraphCheck(definition, [problem.as_dict() for problem in problems])


def _compile_problems(definition: WorkflowDefinition, registry: NodeRegistry) -> list[WorkflowProblem]:
    """Build the nodes once with inert dependencies: parameters that type-check but cannot be used (a bad
    regular expression, say) fail here, in the builder, instead of in the first request after publishing."""
    try:
        compile_workflow(definition, registry=registry, deps=_inert_deps())
    except WorkflowError as exc:
        return list(exc.problems)
    except Exception as exc:  # a node factory's own bug must not break validation of the rest
        return [WorkflowProblem("compile_failed", f"the workflow does not compile: {type(exc).__name__}: {exc}")]
    return []


class _NoRetriever:
    async def search(self, query: str, *, limit: int, language: str | None = None, kind: str | None = None) -> list:
        return []


def _inert_deps() -> Any:
    return PipelineDeps(retriever=_NoRetriever())


def graph_without_layout(graph: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in graph.items() if key != LAYOUT_KEY}
