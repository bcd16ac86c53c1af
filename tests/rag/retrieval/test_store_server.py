"""The store's contract tests (test_store.py, the semantic cache's) run on every kind of store; on a Qdrant server
only when one is given, which this test says when it is not."""

from __future__ import annotations

import pytest
from qdrant_client import QdrantClient

from tests.rag.stores import HOW_TO_TEST_A_SERVER, STORE_KINDS, qdrant_server_url


def test_the_contract_runs_against_a_qdrant_server_when_one_is_given() -> None:
    if "qdrant-server" not in STORE_KINDS:
        pytest.skip(HOW_TO_TEST_A_SERVER)
    # the server the contract tests are about to use answers
    client = QdrantClient(url=qdrant_server_url(), timeout=5)
    try:
        client.get_collections()
    finally:
        client.close()
