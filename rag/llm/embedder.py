"""Dense embeddings from an OpenAI-compatible ``/v1/embeddings`` server, shaped like rag.retrieval's embedders.

rag.retrieval.embedding.Embedder is synchronous (the offline LexicalEmbedder is CPU work run in a thread). A
network embedder belongs on the event loop instead: a thread per query would hold a thread for the whole round
trip, and the concurrency manager and the shared HTTP client live on the loop. So the real methods here are
async (``aembed_documents`` / ``aembed_query``); async callers (the retriever) prefer them
(rag.retrieval.embedding.aembed_query does the choosing).

Every call goes through ``LLMBackend.embed``: the call policy (RPM window, retries, timeouts) and the process's
concurrency manager (backend ``embedding``). The manager is bound to one event loop, so the sync
``embed_documents`` / ``embed_query`` (the indexer and the semantic cache call them from worker threads) run
the async call on the embedder's *home loop* and wait for it, with a timeout:

- the loop bound with ``bind_loop`` (a command's job loop), else the one ``home_loop()`` names (the server's
  serving loop, from rag.wiring), else the last loop an async method ran on;
- with none of these running, a private loop for the call (a command without a loop of its own).

Called on a running loop, the sync methods refuse: they would block it.

Failures name the endpoint, the model and what failed, and keep their class (``Busy``, ``UpstreamTimeout``,
``UpstreamError``), so the pipeline still maps them to its error codes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from rag.errors import PipelineAbort, UpstreamTimeout
from rag.llm.backends import LLMBackend
from rag.llm.client import aclose_clients
from rag.retrieval.prompts import EmbeddingPrompts

__all__ = ["OpenAIEmbedder"]

T = TypeVar("T")
LoopGetter = Callable[[], "asyncio.AbstractEventLoop | None"]
# beyond the policy's own deadlines: a loop that never runs our call must not hang the indexing thread
_BRIDGE_MARGIN = 10.0


def _alive(loop: asyncio.AbstractEventLoop | None) -> bool:
    return loop is not None and loop.is_running() and not loop.is_closed()


class OpenAIEmbedder:
    kind = "openai"

    def __init__(
        self, backend: LLMBackend, *, home_loop: LoopGetter | None = None, prompts: EmbeddingPrompts | None = None
    ) -> None:
        self._backend = backend
        self.prompts = prompts or EmbeddingPrompts()
        self._home_loop = home_loop
        self._bound: asyncio.AbstractEventLoop | None = None
        self._seen: asyncio.AbstractEventLoop | None = None

    @property
    def backend(self) -> LLMBackend:
        return self._backend

    @property
    def name(self) -> str:
        """Identifies the vector space (stored with an index, so a query never mixes spaces)."""
        cfg = self._backend.config
        return f"openai-{cfg.embedding_model}-d{cfg.embedding_dim}{self.prompts.tag()}"

    @property
    def dim(self) -> int:
        return self._backend.config.embedding_dim

    @property
    def batch_size(self) -> int:
        """Texts per request; the indexer embeds batches of this size (one progress step each)."""
        return self._backend.config.embedding_batch_size

    @property
    def endpoint(self) -> str:
        return self._backend.config.embeddings_url.rstrip("/") + "/embeddings"

    def bind_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Run sync calls on `loop` (None: back to the home loop getter)."""
        self._bound = loop

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        prompts = self.prompts
        return await self._embed(prompts.passages(list(texts)), node="embed_documents", input_type=prompts.passage_type)

    async def aembed_query(self, text: str) -> list[float]:
        prompts = self.prompts
        vectors = await self._embed([prompts.query(text)], node="embed_query", input_type=prompts.query_type)
        return vectors[0]

    async def _embed(self, texts: Sequence[str], *, node: str, input_type: str) -> list[list[float]]:
        self._seen = asyncio.get_running_loop()
        if not texts:
            return []
        try:
            return await self._backend.embed(texts, node=node, input_type=input_type)
        except PipelineAbort as exc:
            raise type(exc)(self._describe(exc.message, len(texts)), retry_after=exc.retry_after) from exc

    def _describe(self, what: str, count: int) -> str:
        model = self._backend.config.embedding_model
        return f"embedding server {self.endpoint} (model {model}, {count} texts) failed: {what}"

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._run_sync(self.aembed_documents(texts), len(texts))

    def embed_query(self, text: str) -> list[float]:
        return self._run_sync(self.aembed_query(text), 1)

    def _home(self) -> asyncio.AbstractEventLoop | None:
        for loop in (self._bound, self._home_loop() if self._home_loop else None, self._seen):
            if _alive(loop):
                return loop
        return None

    def _run_sync(self, coro: Coroutine[Any, Any, T], count: int) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:
            coro.close()
            raise RuntimeError("OpenAIEmbedder: inside a running event loop, await aembed_documents/aembed_query")
        home = self._home()
        if home is None:
            return asyncio.run(_on_private_loop(coro))
        cfg = self._backend.config
        requests = max(1, math.ceil(count / cfg.embedding_batch_size))
        timeout = requests * cfg.total_timeout + _BRIDGE_MARGIN
        future = asyncio.run_coroutine_threadsafe(coro, home)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise UpstreamTimeout(self._describe(f"no answer within {timeout:.0f} s", count)) from None
        except BaseException:
            future.cancel()  # an interrupted waiter (KeyboardInterrupt) must not leave the call running
            raise


async def _on_private_loop(coro: Coroutine[Any, Any, T]) -> T:
    try:
        return await coro
    finally:
        # The clients were opened on this private loop; close them before it goes away.
        await aclose_clients()
