"""The data-flow check: a node's input must be written on every path from the entry, loops and branches included."""

from __future__ import annotations

from typing import Any

from rag.engine import Node, NodeRegistry, NodeType, WorkflowDefinition, validate_workflow
from rag.engine.dataflow import written_on_every_path
from rag.engine.errors import WorkflowProblem
from rag.nodes import build_registry


def problems(data: dict[str, Any], registry: NodeRegistry | None = None) -> list[WorkflowProblem]:
    return validate_workflow(WorkflowDefinition.from_dict(data), registry or build_registry())


def mismatches(data: dict[str, Any], registry: NodeRegistry | None = None) -> list[WorkflowProblem]:
    found = problems(data, registry)
    assert {p.code for p in found} <= {"type_mismatch"}, found
    return found


def normalizer_then_cache(*, blocked_to: str, extra_nodes: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    """guard --default--> normalizer --> cache_lookup; the blocked route goes to `blocked_to`."""
    nodes = [("guard", "guard"), ("normalizer", "language_normalizer"), ("cache", "cache_lookup"), *extra_nodes]
    edges = [
        {"source": "guard", "target": "normalizer"},
        {"source": "guard", "target": blocked_to, "route": "blocked"},
        {"source": "normalizer", "target": "cache"},
        {"source": "cache", "target": "END", "route": "hit"},
        {"source": "cache", "target": "END", "route": "miss"},
    ]
    edges += [{"source": node_id, "target": "cache"} for node_id, _ in extra_nodes]
    return {"entry": "guard", "nodes": [{"id": i, "type": t} for i, t in nodes], "edges": edges}


def test_a_field_written_on_one_branch_only_is_a_mismatch_on_the_reader() -> None:
    # 'normalizer' is an ancestor of 'cache', but the blocked branch reaches it without passing there.
    found = mismatches(normalizer_then_cache(blocked_to="cache"))
    assert {p.node for p in found} == {"cache"}
    [problem] = [p for p in found if "'normalized_question'" in p.message]
    assert problem.message == (
        "node 'cache' (cache_lookup) reads 'normalized_question' but not every path to it writes it: "
        "on path guard --blocked--> cache, arriving from predecessor 'guard', no node writes it "
        "(only 'normalizer' on other paths)"
    )


def test_a_field_written_on_both_branches_is_valid() -> None:
    data = normalizer_then_cache(blocked_to="normalizer_b", extra_nodes=(("normalizer_b", "language_normalizer"),))
    assert problems(data) == []


def test_the_path_named_is_a_shortest_one_through_the_branch_that_skips_the_writer() -> None:
    data = normalizer_then_cache(blocked_to="log", extra_nodes=(("log", "telemetry"),))
    [problem] = [p for p in mismatches(data) if "'language'" in p.message]
    assert "on path guard --blocked--> log --default--> cache, arriving from predecessor 'log'" in problem.message


def never_built(deps: Any, params: dict[str, Any]) -> Node:
    raise AssertionError("these workflows are validated, never built")


def _loop_registry() -> NodeRegistry:
    """start (reads nothing), reader (reads search_query), writer (writes search_query, may loop back)."""
    registry = NodeRegistry()
    label = {"en": "x", "zh-hant": "x"}
    registry.register(NodeType("start", label, (), (), never_built))
    registry.register(NodeType("reader", label, ("search_query",), (), never_built))
    registry.register(
        NodeType("writer", label, (), ("search_query",), never_built, routes=("again", "done")),
    )
    registry.register(NodeType("request_reader", label, ("question", "history"), (), never_built))
    return registry


def _graph(entry: str, edges: list[tuple[str, str, str]], **bounds: int) -> dict[str, Any]:
    nodes = sorted({source for source, _, _ in edges})
    return {
        "entry": entry,
        "nodes": [{"id": n, "type": n} for n in nodes],
        "edges": [
            {"source": s, "target": t, "route": r}
            | ({"max_visits": bounds[s + "_" + r]} if s + "_" + r in bounds else {})
            for s, t, r in edges
        ],
    }


def test_a_field_written_only_later_in_a_loop_is_a_mismatch() -> None:
    # start -> reader -> writer --again--> reader: the writer is an ancestor of the reader, but the first pass
    # reaches the reader before anything wrote the field.
    data = _graph(
        "start",
        [
            ("start", "reader", "default"),
            ("reader", "writer", "default"),
            ("writer", "reader", "again"),
            ("writer", "END", "done"),
        ],
        writer_again=2,
    )
    [problem] = mismatches(data, _loop_registry())
    assert problem.node == "reader"
    assert problem.message == (
        "node 'reader' (reader) reads 'search_query' but not every path to it writes it: "
        "on path start --default--> reader, arriving from predecessor 'start', no node writes it "
        "(only 'writer' on other paths)"
    )


def test_a_field_written_before_a_loop_is_enough_for_every_pass() -> None:
    data = _graph(
        "start",
        [
            ("start", "writer", "default"),
            ("writer", "reader", "again"),
            ("reader", "writer", "default"),
            ("writer", "END", "done"),
        ],
        writer_again=2,
    )
    assert problems(data, _loop_registry()) == []


def test_the_entry_node_has_only_the_request_fields() -> None:
    data = _graph(
        "reader",
        [("reader", "writer", "default"), ("writer", "reader", "again"), ("writer", "END", "done")],
        writer_again=2,
    )
    [problem] = mismatches(data, _loop_registry())
    assert problem.node == "reader"
    assert "it is the entry node, where a run has only the request's fields" in problem.message
    assert "'writer'" in problem.message


def test_fields_of_the_initial_state_need_no_writer() -> None:
    data = _graph("start", [("start", "request_reader", "default"), ("request_reader", "END", "default")])
    assert problems(data, _loop_registry()) == []


def test_must_write_sets_intersect_over_predecessors_to_a_fixed_point() -> None:
    # a -> b -> d, a -> c -> d, d -> b (loop): d gets what both b and c write, b only what a writes.
    routes = {
        "a": {"x": "b", "y": "c"},
        "b": {"default": "d"},
        "c": {"default": "d"},
        "d": {"again": "b", "end": "END"},
    }
    writes = {
        "a": frozenset({"f_a"}),
        "b": frozenset({"f_shared", "f_b"}),
        "c": frozenset({"f_shared"}),
        "d": frozenset({"f_d"}),
    }
    before = written_on_every_path("a", writes.keys(), routes, writes)
    assert before == {
        "a": frozenset(),
        "b": frozenset({"f_a"}),
        "c": frozenset({"f_a"}),
        "d": frozenset({"f_a", "f_shared"}),
    }
