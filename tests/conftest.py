"""Fixtures shared by the whole suite."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections


@pytest.fixture(scope="session", autouse=True)
def demo_index() -> Iterator[None]:
    """The bundled demo corpus, indexed once per test run into the run's own local store.

    Tests that ask questions get real answers citing real documents. The pipeline runtime opens the store
    lazily and keeps it for the session; it is closed at the end so the local-mode lock is released.
    """
    from rag.retrieval.embedding import LexicalEmbedder
    from rag.retrieval.indexer import build_index
    from rag.retrieval.markdown import load_markdown_dir
    from rag.retrieval.store import open_store_from_settings
    from rag.wiring import reset_runtime

    store = open_store_from_settings()
    try:
        if store.is_empty():
            build_index(load_markdown_dir(settings.CORPUS_DIR), store, LexicalEmbedder())
    finally:
        store.close()
    yield
    reset_runtime()


@pytest.fixture(scope="session", autouse=True)
def close_async_orm_connections(django_db_setup: None) -> Iterator[None]:
    """Close, before the test databases are dropped, the connection async tests left on asgiref's sync thread.

    `Model.objects.aget()` and friends in an async test run on asgiref's one sync thread (no outer sync context
    here), and nothing there closes the connection they open, as a request's end or `database_sync_to_async`
    would in the product. PostgreSQL then refuses to drop a test database another session still uses.
    """
    yield
    asyncio.run(sync_to_async(connections.close_all)())
