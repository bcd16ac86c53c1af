"""`POST /api/v1/rag/workflows/validate`: the engine's validator, each problem named and placed on its node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from tests.rag.workflows.conftest import default_graph, lean_graph, post_json

VALIDATE = "/api/v1/rag/workflows/validate"
pytestmark = pytest.mark.django_db

Graph = dict[str, Any]


def _edges_without(graph: Graph, source: str, route: str) -> Graph:
    graph["edges"] = [e for e in graph["edges"] if not (e["source"] == source and e["route"] == route)]
    return graph


def unknown_node_type(graph: Graph) -> Graph:
    graph["nodes"].append({"id": "oracle", "type": "crystal_ball", "params": {}})
    graph["edges"].append({"source": "oracle", "target": "END", "route": "default"})
    return graph


def edge_to_unknown_node(graph: Graph) -> Graph:
    _edges_without(graph, "cache_store", "default")
    graph["edges"].append({"source": "cache_store", "target": "nowhere", "route": "default"})
    return graph


def missing_route(graph: Graph) -> Graph:
    return _edges_without(graph, "guard", "blocked")


def unknown_route(graph: Graph) -> Graph:
    graph["edges"].append({"source": "telemetry", "target": "END", "route": "sideways"})
    return graph


def unreachable_node(graph: Graph) -> Graph:
    graph["nodes"].append({"id": "orphan", "type": "telemetry", "params": {}})
    graph["edges"].append({"source": "orphan", "target": "END", "route": "default"})
    return graph


def unbounded_loop(graph: Graph) -> Graph:
    for edge in graph["edges"]:
        edge.pop("max_visits", None)
    return graph


def type_mismatch(graph: Graph) -> Graph:
    # Without the normaliser nobody writes the normalised question the cache and planner read.
    graph["nodes"] = [n for n in graph["nodes"] if n["id"] != "language_normalizer"]
    _edges_without(graph, "language_normalizer", "default")
    for edge in graph["edges"]:
        if edge["source"] == "guard" and edge["route"] == "default":
            edge["target"] = "cache_lookup"
    return graph


def type_mismatch_on_one_branch(graph: Graph) -> Graph:
    # The normaliser is still there, but a refused question now reaches the cache lookup without passing it.
    for edge in graph["edges"]:
        if edge["source"] == "guard" and edge["route"] == "blocked":
            edge["target"] = "cache_lookup"
    return graph


def normalized_on_both_branches(graph: Graph) -> Graph:
    """Both of the guard's branches pass a normaliser before the cache lookup: valid."""
    graph["nodes"].append({"id": "normalize_refused", "type": "language_normalizer", "params": {}})
    for edge in graph["edges"]:
        if edge["source"] == "guard" and edge["route"] == "blocked":
            edge["target"] = "normalize_refused"
    graph["edges"].append({"source": "normalize_refused", "target": "cache_lookup", "route": "default"})
    return graph


def bad_param(graph: Graph) -> Graph:
    graph["nodes"][0]["params"] = {"max_chars": "lots"}
    return graph


def unusable_param(graph: Graph) -> Graph:
    # Type-checks as a list of strings, but is not a regular expression: found by the trial compile.
    graph["nodes"][0]["params"] = {"blocked_patterns": ["(unclosed"]}
    return graph


CASES: list[tuple[Callable[[Graph], Graph], str, str, tuple[str, ...]]] = [
    (unknown_node_type, "unknown_node_type", "oracle", ("'oracle'", "'crystal_ball'")),
    (edge_to_unknown_node, "unknown_node", "cache_store", ("'cache_store'", "unknown node 'nowhere'")),
    (missing_route, "missing_route", "guard", ("'guard'", "route 'blocked'")),
    (unknown_route, "unknown_route", "telemetry", ("'telemetry'", "no route 'sideways'")),
    (unreachable_node, "unreachable", "orphan", ("'orphan'", "cannot be reached from 'guard'")),
    (unbounded_loop, "unbounded_loop", "query_builder", ("query_builder", "retrieval_checker", "max_visits")),
    (type_mismatch, "type_mismatch", "cache_lookup", ("'cache_lookup'", "reads 'normalized_question'")),
    (
        type_mismatch_on_one_branch,
        "type_mismatch",
        "cache_lookup",
        (
            "'cache_lookup'",
            "reads 'normalized_question' but not every path to it writes it",
            "guard --blocked--> cache_lookup",
            "predecessor 'guard'",
            "'language_normalizer'",
        ),
    ),
    (bad_param, "bad_param", "guard", ("'guard'", "'max_chars' must be int")),
    (unusable_param, "bad_param", "guard", ("'guard'", "not a valid regular expression")),
]


@pytest.mark.parametrize(
    ("breaker", "code", "node", "phrases"), CASES, ids=[case[1] + ":" + case[0].__name__ for case in CASES]
)
def test_each_wiring_mistake_is_reported_on_its_node(
    staff_client: Client, breaker: Callable[[Graph], Graph], code: str, node: str, phrases: tuple[str, ...]
) -> None:
    response = post_json(staff_client, VALIDATE, {"graph": breaker(default_graph())})
    assert response.status_code == 200
    body = response.json()
    assert body["valid"] is False
    matching = [p for p in body["problems"] if p["code"] == code]
    assert matching, body["problems"]
    problem = matching[0]
    assert problem["node"] == node
    for phrase in phrases:
        assert phrase in problem["message"], problem


@pytest.mark.parametrize(
    "graph",
    [default_graph(), lean_graph(), normalized_on_both_branches(default_graph())],
    ids=["default", "lean", "normalized-on-both-branches"],
)
def test_valid_graphs_have_no_problems(staff_client: Client, graph: Graph) -> None:
    assert post_json(staff_client, VALIDATE, {"graph": graph}).json() == {"valid": True, "problems": []}


def test_canvas_positions_do_not_disturb_the_engine(staff_client: Client) -> None:
    graph = default_graph() | {"layout": {"guard": [40, 80], "END": [900, 80]}}
    assert post_json(staff_client, VALIDATE, {"graph": graph}).json()["valid"] is True


def test_an_unfinished_canvas_is_a_problem_not_an_error(staff_client: Client) -> None:
    body = post_json(staff_client, VALIDATE, {"graph": {"name": "new", "entry": "", "nodes": [], "edges": []}}).json()
    assert body["valid"] is False
    assert body["problems"][0]["code"] == "bad_shape"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"graph": [1, 2]}, "must be a JSON object"),
        ({"graph": {"nodes": "guard"}}, "'graph.nodes' must be a list"),
        ({"graph": {"nodes": [{"id": str(i), "type": "guard"} for i in range(201)]}}, "at most 200 nodes"),
    ],
)
def test_a_graph_of_the_wrong_shape_is_a_400(staff_client: Client, payload: dict, message: str) -> None:
    response = post_json(staff_client, VALIDATE, payload)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]
