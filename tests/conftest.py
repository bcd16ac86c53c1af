"""Fixtures shared by the whole suite."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_django.fixtures
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections

from tests.ask_workers import ask_workers  # noqa: F401 - the shared pair of answering workers, used by name
from tests.llm_simulator import suite_simulator  # noqa: F401 - the run's one LLM simulator, used by name


def _with_the_default_database(find: Any) -> Any:
    def databases_for_setup(items: Any) -> tuple[set[str], set[str]]:
        aliases, serialized = find(items)
        return aliases | {"default"}, serialized

    return databases_for_setup


# pytest-django creates only the test databases that collected tests ask for by marker; the demo index (below) lives
# in the default one, which must therefore exist in every run, whatever subset of tests is collected.
pytest_django.fixtures._get_databases_for_setup = _with_the_default_database(
    pytest_django.fixtures._get_databases_for_setup
)

# The vector store's tables (rag.models): the demo index lives there for the whole run.
INDEX_TABLES = frozenset({"rag_indexbuild", "rag_indexpoint", "rag_indexalias"})


@pytest.fixture(scope="session", autouse=True)
def provided_runtime() -> None:
    """The suite is assembled as the server is (chatbot.asgi): the wiring's lazily built runtime is provided to the
    modules that serve. Tests that run on a runtime of their own replace `get_runtime` where it is used."""
    from rag.provider import provide_runtime
    from rag.wiring import get_runtime

    provide_runtime(get_runtime)


@pytest.fixture(scope="session", autouse=True)
def keep_the_index_across_flushes() -> Iterator[None]:
    """A transactional test ends by emptying every table (Django's `flush`); the index tables are left alone, as a
    developer's index survives a test run of theirs. Tests that build indexes of their own do it under an alias of
    their own and drop it (tests/rag/stores.py)."""
    from django.core.management.commands import flush

    # The stubs do not list the names the command module imports; sql_flush is one of them.
    original = flush.sql_flush  # type: ignore[attr-defined]

    def sql_flush(style: Any, connection: Any, **options: Any) -> list[str]:
        tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
        return connection.ops.sql_flush(style, [t for t in tables if t not in INDEX_TABLES], **options)

    flush.sql_flush = sql_flush  # type: ignore[attr-defined]
    yield
    flush.sql_flush = original  # type: ignore[attr-defined]


@pytest.fixture(scope="session", autouse=True)
def demo_index(django_db_setup: None, django_db_blocker: Any, keep_the_index_across_flushes: None) -> Iterator[None]:
    """The bundled demo corpus, indexed once per test run into the test database's store.

    Tests that ask questions get real answers citing real documents. The pipeline runtime opens the store
    lazily and keeps it (and its replica) for the session.
    """
    from rag.retrieval.embedding import LexicalEmbedder
    from rag.retrieval.indexer import build_index
    from rag.retrieval.markdown import load_markdown_dir
    from rag.retrieval.store import open_store_from_settings
    from rag.wiring import reset_runtime

    with django_db_blocker.unblock():
        store = open_store_from_settings()
        try:
            if store.is_empty():
                build_index(load_markdown_dir(settings.CORPUS_DIR), store, LexicalEmbedder())
        finally:
            store.close()
        connections.close_all()
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


@pytest.fixture
def private_index(settings: Any, django_db_blocker: Any) -> Iterator[str]:
    """A store alias of this test's own (`QDRANT_COLLECTION`), so what it indexes leaves the demo index alone; its
    builds are dropped afterwards. The pipeline runtime is reset on both sides."""
    from rag.retrieval.store import VectorStore
    from rag.wiring import reset_runtime
    from tests.rag.stores import drop_everything, unique_alias

    alias = unique_alias("private")
    settings.QDRANT_URL = ""
    settings.QDRANT_COLLECTION = alias
    reset_runtime()
    yield alias
    reset_runtime()
    with django_db_blocker.unblock():
        drop_everything(VectorStore.open_database(alias))
