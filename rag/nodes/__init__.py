"""The pipeline's node types, one module each; `build_registry()` is the catalogue the engine compiles against."""

from __future__ import annotations

from rag.engine import NodeRegistry, NodeType
from rag.engine.reads import undeclared_reads
from rag.nodes import (
    cache_lookup,
    cache_response,
    cache_store,
    curated_lookup,
    followup_transform,
    guard,
    language_normalizer,
    planner,
    query_builder,
    response_synth,
    retrieval_checker,
    telemetry,
    tool_executor,
)
from rag.state import REQUEST_FIELDS, RUN_FIELDS, STATE_FIELDS

NODE_TYPES: tuple[NodeType, ...] = (
    guard.NODE_TYPE,
    language_normalizer.NODE_TYPE,
    curated_lookup.NODE_TYPE,
    cache_lookup.NODE_TYPE,
    cache_response.NODE_TYPE,
    planner.NODE_TYPE,
    query_builder.NODE_TYPE,
    tool_executor.NODE_TYPE,
    retrieval_checker.NODE_TYPE,
    followup_transform.NODE_TYPE,
    response_synth.NODE_TYPE,
    cache_store.NODE_TYPE,
    telemetry.NODE_TYPE,
)


def build_registry() -> NodeRegistry:
    """Every node type, each checked to read no state field it does not declare (`rag.engine.reads`)."""
    registry = NodeRegistry()
    for node_type in NODE_TYPES:
        undeclared = undeclared_reads(node_type, state_fields=STATE_FIELDS, always_set=REQUEST_FIELDS | RUN_FIELDS)
        if undeclared:
            raise ValueError(
                f"node type {node_type.name!r} reads {', '.join(undeclared)} from the state without declaring "
                "it: add it to the node's INPUTS or OPTIONAL_INPUTS"
            )
        registry.register(node_type)
    return registry


__all__ = ["NODE_TYPES", "build_registry"]
