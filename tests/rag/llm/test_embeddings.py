"""Embeddings through /v1/embeddings, and the embedder shaped like rag.retrieval's."""

from __future__ import annotations

import asyncio
import math

import pytest

from devtools.simulator.testing import SimulatorProcess
from rag.errors import UpstreamError
from rag.llm import OpenAIEmbedder
from tests.rag.llm.conftest import SIM_FLAGS, BackendFactory

DIM = SIM_FLAGS["embedding_dim"]


async def test_embed_batches_and_keeps_order(make_backend: BackendFactory, sim: SimulatorProcess) -> None:
    backend = make_backend(embedding_batch_size=2, embedding_model="sim-embedding")
    texts = ["reset password", "download certificate", "learning hours", "two factor", "mobile app"]
    vectors = await backend.embed(texts)

    assert len(vectors) == 5 and all(len(v) == DIM for v in vectors)
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-6) for v in vectors)
    assert await backend.embed([texts[3]]) == [vectors[3]]
    stats = await sim.astats()
    assert stats["endpoints"]["embeddings"]["attempts"] == 4  # ceil(5 / 2) + 1
    requests = [r["body"] for r in await sim.arequests()]
    assert requests[0]["input"] == texts[:2] and requests[0]["encoding_format"] == "float"


async def test_wrong_dimension_is_reported_not_indexed(make_backend: BackendFactory) -> None:
    with pytest.raises(UpstreamError, match=f"returned {DIM} dimensions, expected 1024"):
        await make_backend(embedding_dim=1024).embed(["x"])


async def test_embedder_async_methods_and_sync_bridge(make_backend: BackendFactory) -> None:
    embedder = OpenAIEmbedder(make_backend())
    assert embedder.dim == DIM and embedder.name == f"openai-bge-m3-d{DIM}"
    query = await embedder.aembed_query("reset password")
    documents = await embedder.aembed_documents(["reset password", "other"])
    assert documents[0] == query

    with pytest.raises(RuntimeError, match="await aembed"):
        embedder.embed_query("reset password")
    # Off the loop (a management command, a worker thread) the sync methods work on a private loop.
    assert await asyncio.to_thread(embedder.embed_query, "reset password") == query
