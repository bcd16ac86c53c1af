"""A small async graph engine: nodes, conditional routes, bounded loops, validation at build time.

definition = WorkflowDefinition.from_dict({...})
graph = compile_workflow(definition, registry=catalogue, deps=deps)   # raises WorkflowError
await graph.run(state, writer)
"""

from rag.engine.cache import GraphCache
from rag.engine.definition import END, EdgeSpec, NodeSpec, WorkflowDefinition
from rag.engine.errors import WorkflowError, WorkflowProblem
from rag.engine.graph import CompiledGraph, compile_workflow, validate_workflow
from rag.engine.registry import Node, NodeRegistry, NodeType, ParamSpec

__all__ = [
    "END",
    "CompiledGraph",
    "EdgeSpec",
    "GraphCache",
    "Node",
    "NodeRegistry",
    "NodeSpec",
    "NodeType",
    "ParamSpec",
    "WorkflowDefinition",
    "WorkflowError",
    "WorkflowProblem",
    "compile_workflow",
    "validate_workflow",
]
