"""`GET /v1/models` in-process: one model per backend, with the workflow it runs; keys as for completions."""

from __future__ import annotations

import pytest

from chatbot.apikeys.services import CreatedKey
from tests.chatbot.openai_api.conftest import MakeKey
from tests.chatbot.openai_api.helpers import MODELS, api_request

pytestmark = pytest.mark.django_db(transaction=True)


async def test_the_models_are_the_backends_with_their_workflow(chat_key: CreatedKey) -> None:
    response = await api_request(MODELS, secret=chat_key.secret, method="GET")

    assert response.status == 200
    body = response.json()
    assert body["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"], m["workflow"]) for m in body["data"]] == [
        ("chat", "model", "helpcentre", "default"),
        ("responses", "model", "helpcentre", "default"),
    ]


async def test_one_model_and_an_unknown_one(chat_key: CreatedKey) -> None:
    found = await api_request(MODELS + "/responses", secret=chat_key.secret, method="GET")
    missing = await api_request(MODELS + "/gpt-4o", secret=chat_key.secret, method="GET")
    assert found.status == 200 and found.json()["id"] == "responses"
    assert missing.status == 404 and missing.json()["error"]["code"] == "model_not_found"


async def test_listing_needs_a_chat_key_but_not_a_turn_of_its_rate_limit(make_key: MakeKey) -> None:
    assert (await api_request(MODELS, method="GET")).status == 401
    limited = await make_key(scopes=["chat"], rate_limit_per_minute=1)
    for _ in range(3):
        assert (await api_request(MODELS, secret=limited.secret, method="GET")).status == 200
    assert (await api_request(MODELS, method="POST", secret=limited.secret)).status == 405


async def test_a_published_workflow_is_named_on_its_model(chat_key: CreatedKey) -> None:
    from rag.workflows.models import WorkflowDraft

    await WorkflowDraft.objects.acreate(
        name="forms first", graph={}, published=True, backend="chat", published_version=3, published_graph={}
    )
    body = (await api_request(MODELS, secret=chat_key.secret, method="GET")).json()
    workflows = {m["id"]: m["workflow"] for m in body["data"]}
    assert workflows == {"chat": {"name": "forms first", "version": 3}, "responses": "default"}
