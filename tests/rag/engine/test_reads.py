"""A node's declared inputs against what its module reads of the state (rag.engine.reads), as the registry
checks them when it is built."""

from __future__ import annotations

import pytest

import rag.nodes
from rag.engine import NodeType
from rag.engine.reads import module_state_reads, undeclared_reads
from rag.state import REQUEST_FIELDS, RUN_FIELDS, STATE_FIELDS
from tests.rag.engine import reading_node


def reading(**declared: tuple[str, ...]) -> NodeType:
    return NodeType(
        name="reading",
        description={"en": "reads", "zh-hant": "讀"},
        inputs=declared.get("inputs", ()),
        optional_inputs=declared.get("optional_inputs", ()),
        outputs=declared.get("outputs", ("answer",)),
        factory=reading_node.build,
    )


def test_the_reads_are_found_in_the_nodes_module_fields_and_methods_alike() -> None:
    assert {"error", "answer", "queries", "fail"} <= module_state_reads(reading_node.__name__)


def test_a_field_read_without_being_declared_is_named_and_runtime_fields_are_free() -> None:
    check = {"state_fields": STATE_FIELDS, "always_set": REQUEST_FIELDS | RUN_FIELDS}
    assert undeclared_reads(reading(), **check) == ["queries"]  # error: a run field; fail: not a field
    assert undeclared_reads(reading(optional_inputs=("queries",)), **check) == []
    assert undeclared_reads(reading(inputs=("queries",)), **check) == []
    # without the run fields, reading `error` is undeclared too
    assert undeclared_reads(reading(), state_fields=STATE_FIELDS, always_set=REQUEST_FIELDS) == ["error", "queries"]


def test_every_node_of_the_product_declares_what_it_reads() -> None:
    registry = rag.nodes.build_registry()
    assert {node_type.name for node_type in rag.nodes.NODE_TYPES} <= set(registry.names())


def test_the_registry_is_not_built_with_a_node_that_reads_what_it_does_not_declare(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rag.nodes, "NODE_TYPES", (*rag.nodes.NODE_TYPES, reading()))
    with pytest.raises(ValueError, match=r"node type 'reading' reads queries from the state without declaring it"):
        rag.nodes.build_registry()
