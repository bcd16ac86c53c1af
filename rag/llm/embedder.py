"""Dense embeddings from an OpenAI-compatible ``/v1/embeddings`` server, shaped like rag.retrieval's embedders.

rag.retrieval.embedding.Embedder is synchronous (the offline LexicalEmbedder is CPU work run in a thread). A
network embedder belongs on the event loop instead: a thread per query would hold a thread for the whole round
trip, and the concurrency manager and the shared HTTP client live on the loop. So the real methods here are
async (``aembed_documents`` / ``aembed_query``); async callers (the retriever, the semantic cache) should prefer
them when present::

    if hasattr(embedder, "aembed_query"):
        vector = await embedder.aembed_query(text)
    else:
        vector = await asyncio.to_thread(embedder.embed_query, text)

The sync ``embed_documents`` / ``embed_query`` exist for code with no running loop (``manage.py reindex`` and
other commands): they run the async call on a private loop with a private client. Called from a thread while
the server's loop runs, they would bypass that loop's concurrency manager, so they refuse to run inside a
running loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from rag.llm.backends import LLMBackend
from rag.llm.client import aclose_clients

__all__ = ["OpenAIEmbedder"]

T = TypeVar("T")


class OpenAIEmbedder:
    def __init__(self, backend: LLMBackend) -> None:
        self._backend = backend

    @property
    def name(self) -> str:
        """Identifies the vector space (stored with an index, so a query never mixes spaces)."""
        cfg = self._backend.config
        return f"openai-{cfg.embedding_model}-d{cfg.embedding_dim}"

    @property
    def dim(self) -> int:
        return self._backend.config.embedding_dim

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._backend.embed(texts, node="embed_documents")

    async def aembed_query(self, text: str) -> list[float]:
        vectors = await self._backend.embed([text], node="embed_query")
        return vectors[0]

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._run_sync(self.aembed_documents(texts))

    def embed_query(self, text: str) -> list[float]:
        return self._run_sync(self.aembed_query(text))

    @staticmethod
    def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise RuntimeError("OpenAIEmbedder: inside a running event loop, await aembed_documents/aembed_query")

        async def run() -> T:
            try:
                return await coro
            finally:
                # The clients were opened on this private loop; close them before it goes away.
                await aclose_clients()

        return asyncio.run(run())
