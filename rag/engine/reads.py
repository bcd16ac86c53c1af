"""What a node reads of the pipeline state, found in its own source, against what its type declares.

A node type declares its inputs (and optional inputs) so that a workflow is checked before it runs: an input no
upstream node writes is a problem the builder shows. A declaration written by hand drifts from the code; this
module reads the node's module (`state.<field>` loaded anywhere in it) and names every field read that is neither
declared nor filled for every run (request and run fields, `rag.state`). The registry applies it when it is built,
so a node that starts reading a new field without declaring it fails every test that builds the registry.

Only the node's own module is read: a helper elsewhere handed the whole state is not followed.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rag.engine.registry import NodeType

__all__ = ["module_state_reads", "undeclared_reads"]

STATE_NAME = "state"  # what every node calls the pipeline state it is given


@functools.cache
def module_state_reads(module_name: str) -> frozenset[str]:
    """Every attribute loaded from a name `state` in the module's source (empty when its source is unavailable)."""
    module = sys.modules.get(module_name)
    if module is None:
        return frozenset()
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):  # no source shipped: nothing to check against
        return frozenset()
    return frozenset(
        node.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Load)
        and isinstance(node.value, ast.Name)
        and node.value.id == STATE_NAME
    )


def undeclared_reads(node_type: NodeType, *, state_fields: Iterable[str], always_set: Iterable[str]) -> list[str]:
    """The state fields `node_type`'s module reads without declaring them (as input, optional input or output)
    and that are not `always_set` for every run; methods and other attributes of the state are not fields."""
    fields, free = frozenset(state_fields), frozenset(always_set)
    declared = {*node_type.inputs, *node_type.optional_inputs, *node_type.outputs}
    reads = module_state_reads(node_type.factory.__module__)
    return sorted(name for name in reads if name in fields and name not in declared and name not in free)
