"""`GET /api/v1/rag/nodes`: the node catalogue the graph builder's palette is made from."""

from __future__ import annotations

import pytest
from django.test import Client

from rag.nodes import build_registry
from rag.workflows.default import DEFAULT_WORKFLOW

NODES = "/api/v1/rag/nodes"
pytestmark = pytest.mark.django_db


def test_every_node_type_is_described_in_both_languages_with_routes_and_params(staff_client: Client) -> None:
    response = staff_client.get(NODES)
    assert response.status_code == 200
    body = response.json()
    by_name = {node["name"]: node for node in body["nodes"]}
    assert sorted(by_name) == build_registry().names()
    assert {node["type"] for node in DEFAULT_WORKFLOW["nodes"]} <= set(by_name)
    for node in body["nodes"]:
        assert node["description"]["en"].strip(), node["name"]
        assert node["description"]["zh-hant"].strip(), node["name"]
        assert node["routes"], node["name"]
        assert {"inputs", "optional_inputs", "outputs", "params"} <= node.keys()
        for name, spec in node["params"].items():
            assert spec["type"] in ("int", "float", "bool", "str", "list"), (node["name"], name)
            assert "default" in spec and "description" in spec


def test_routes_params_and_the_end_pseudo_node_are_listed(staff_client: Client) -> None:
    body = staff_client.get(NODES).json()
    by_name = {node["name"]: node for node in body["nodes"]}
    assert by_name["guard"]["routes"] == ["default", "blocked"]
    assert by_name["planner"]["routes"] == ["retrieve", "followup", "direct"]
    assert by_name["retrieval_checker"]["routes"] == ["relevant", "retry", "fallback"]
    assert by_name["guard"]["params"]["max_chars"] == {
        "type": "int",
        "default": 2000,
        "description": "Longest accepted question, in characters",
        "minimum": 1,
    }
    assert set(body["routes"]) == {
        "default",
        "blocked",
        "hit",
        "miss",
        "retrieve",
        "followup",
        "direct",
        "relevant",
        "retry",
        "fallback",
    }
    assert body["end"]["name"] == "END"
    assert body["end"]["routes"] == []
    assert body["end"]["description"]["zh-hant"]
