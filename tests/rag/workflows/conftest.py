"""Fixtures of the workflow draft tests: graphs derived from the shipped default, and API clients."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from rag.workflows.default import DEFAULT_WORKFLOW

# The seed pipeline without the semantic cache and telemetry: a different, valid node sequence.
LEAN_NODES = (
    "guard",
    "language_normalizer",
    "planner",
    "query_builder",
    "tool_executor",
    "retrieval_checker",
    "response_synth",
)


def lean_graph(name: str = "lean") -> dict[str, Any]:
    return {
        "name": name,
        "entry": "guard",
        "nodes": [{"id": node, "type": node, "params": {}} for node in LEAN_NODES],
        "edges": [
            {"source": "guard", "target": "language_normalizer", "route": "default"},
            {"source": "guard", "target": "END", "route": "blocked"},
            {"source": "language_normalizer", "target": "planner", "route": "default"},
            {"source": "planner", "target": "query_builder", "route": "retrieve"},
            {"source": "planner", "target": "response_synth", "route": "followup"},
            {"source": "planner", "target": "response_synth", "route": "direct"},
            {"source": "query_builder", "target": "tool_executor", "route": "default"},
            {"source": "tool_executor", "target": "retrieval_checker", "route": "default"},
            {"source": "retrieval_checker", "target": "response_synth", "route": "relevant"},
            {"source": "retrieval_checker", "target": "query_builder", "route": "retry", "max_visits": 2},
            {"source": "retrieval_checker", "target": "response_synth", "route": "fallback"},
            {"source": "response_synth", "target": "END", "route": "default"},
        ],
    }


def default_graph() -> dict[str, Any]:
    return copy.deepcopy(DEFAULT_WORKFLOW)


@pytest.fixture
def staff_user(django_user_model: type[User]) -> User:
    user = django_user_model.objects.create_user("editor", password="pw-editor-123", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="rag_workflows"))
    return user


@pytest.fixture
def staff_client(staff_user: User) -> Client:
    client = Client()
    client.force_login(staff_user)
    return client


def post_json(client: Client, url: str, payload: Any) -> Any:
    return client.post(url, payload, content_type="application/json")
