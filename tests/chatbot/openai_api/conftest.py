"""Fixtures of the OpenAI-compatible API tests: a key with the `chat` scope."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from chatbot.apikeys.services import CreatedKey, api_key_create

MakeKey = Callable[..., Awaitable[CreatedKey]]


@pytest.fixture
def make_key() -> MakeKey:
    async def make(**options: Any) -> CreatedKey:
        options.setdefault("name", "tests")
        options.setdefault("rate_limit_per_minute", 0)
        return await sync_to_async(api_key_create)(**options)

    return make


@pytest.fixture
async def chat_key(make_key: MakeKey) -> CreatedKey:
    return await make_key(scopes=["chat"])
