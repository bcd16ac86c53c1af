"""Vector stores for tests, of every kind the product can run on.

- ``database``: the default without `QDRANT_URL` (rag.retrieval.db_backend), in the test database under an alias
  of the test's own, whose builds are dropped afterwards (the suite keeps the index tables across flushes).
- ``qdrant-local``: qdrant-client's local mode in a tmp folder: the same client code as a server, in process.
- ``qdrant-server``: a real Qdrant server, when `QDRANT_URL` is set in the environment (skipped otherwise):
  ``QDRANT_URL=http://127.0.0.1:6333 .venv/bin/pytest tests/rag/retrieval``.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rag.retrieval.store import Engine, VectorStore


def qdrant_server_url() -> str:
    """The Qdrant server the contract tests run against: `QDRANT_URL` as the suite was started with (tests/settings
    blanks the setting itself so the rest of the suite runs on the defaults)."""
    return os.environ.get("HELPCENTRE_TEST_QDRANT_URL", "")


# The kinds every store test runs on; a server's only when one is given (tests/rag/retrieval/test_store_server.py
# says so when it is not).
STORE_KINDS = ("database", "qdrant-local", *(("qdrant-server",) if qdrant_server_url() else ()))


# As fixture params: a test on the database store commits for real (the replicas, the cache's writer and the jobs
# read from threads of their own, which see only committed rows).
def store_params(*kinds: str) -> list[Any]:
    """`STORE_KINDS` (or those of `kinds` this run has) as params of the `store_kind` fixture."""
    return [
        pytest.param(kind, marks=pytest.mark.django_db(transaction=True)) if kind == "database" else kind
        for kind in STORE_KINDS
        if not kinds or kind in kinds
    ]


STORE_PARAMS = store_params()
HOW_TO_TEST_A_SERVER = (
    "no Qdrant server given: run the store's contract tests against one with "
    "QDRANT_URL=http://HOST:6333 .venv/bin/pytest tests/rag/retrieval tests/rag/semcache"
)


def unique_alias(label: str = "t") -> str:
    return f"{label}-{uuid.uuid4().hex[:12]}"


def drop_everything(store: VectorStore) -> None:
    """Delete every build and alias of the store's alias (a test's private builds)."""
    backend = store.backend
    operations = [("delete", name, "") for name in (store.alias, store.previous_alias) if name in backend.aliases()]
    if operations:
        backend.update_aliases(operations)  # type: ignore[arg-type]
    for name in store.builds():
        backend.delete_collection(name)


@contextlib.contextmanager
def open_store(kind: str, tmp_path: Path, *, alias: str = "", engine: Engine = "auto") -> Iterator[VectorStore]:
    if kind == "database":
        store = VectorStore.open_database(alias or unique_alias())
    elif kind == "qdrant-local":
        store = VectorStore.open(alias or "helpcentre", path=tmp_path / "qdrant", engine=engine)
    elif kind == "qdrant-server":
        url = qdrant_server_url()
        if not url:
            pytest.skip(HOW_TO_TEST_A_SERVER)
        store = VectorStore.open(alias or unique_alias(), url=url, engine=engine)
    else:
        raise ValueError(kind)
    try:
        yield store
    finally:
        if kind != "qdrant-local":
            drop_everything(store)
        store.close()
