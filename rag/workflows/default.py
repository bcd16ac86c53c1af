"""The seed pipeline as plain JSON-able data: the same shape a staff draft takes in the graph builder."""

from __future__ import annotations

import copy
from typing import Any

from rag.engine import WorkflowDefinition

_NODE_ORDER = (
    "guard",
    "language_normalizer",
    "curated_lookup",
    "cache_lookup",
    "cache_response",
    "planner",
    "followup_transform",
    "query_builder",
    "tool_executor",
    "retrieval_checker",
    "response_synth",
    "cache_store",
    "telemetry",
)

DEFAULT_WORKFLOW: dict[str, Any] = {
    "name": "default",
    "entry": "guard",
    # Node ids are the type names: events then name the same node whichever way one looks at them.
    "nodes": [{"id": name, "type": name, "params": {}} for name in _NODE_ORDER],
    "edges": [
        {"source": "guard", "target": "language_normalizer", "route": "default"},
        # A refused request still passes telemetry, so refusals are counted too.
        {"source": "guard", "target": "telemetry", "route": "blocked"},
        # A curated answer comes first: staff approved it, and it stands in for anything generated or cached.
        {"source": "language_normalizer", "target": "curated_lookup", "route": "default"},
        {"source": "curated_lookup", "target": "cache_response", "route": "hit"},
        {"source": "curated_lookup", "target": "cache_lookup", "route": "miss"},
        {"source": "cache_lookup", "target": "cache_response", "route": "hit"},
        {"source": "cache_lookup", "target": "planner", "route": "miss"},
        {"source": "cache_response", "target": "telemetry", "route": "default"},
        {"source": "planner", "target": "followup_transform", "route": "followup"},
        {"source": "planner", "target": "response_synth", "route": "direct"},
        {"source": "planner", "target": "query_builder", "route": "retrieve"},
        {"source": "followup_transform", "target": "response_synth", "route": "default"},
        {"source": "query_builder", "target": "tool_executor", "route": "default"},
        {"source": "tool_executor", "target": "retrieval_checker", "route": "default"},
        {"source": "retrieval_checker", "target": "response_synth", "route": "relevant"},
        # The loop's bound matches retrieval_checker's max_loops (2): the checker stops asking first.
        {"source": "retrieval_checker", "target": "query_builder", "route": "retry", "max_visits": 2},
        {"source": "retrieval_checker", "target": "response_synth", "route": "fallback"},
        {"source": "response_synth", "target": "cache_store", "route": "default"},
        {"source": "cache_store", "target": "telemetry", "route": "default"},
        {"source": "telemetry", "target": "END", "route": "default"},
    ],
}


def default_workflow() -> WorkflowDefinition:
    # A deep copy so a caller editing the dict it got from a definition never alters the seed.
    return WorkflowDefinition.from_dict(copy.deepcopy(DEFAULT_WORKFLOW))
