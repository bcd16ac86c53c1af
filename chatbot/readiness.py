"""Whether this worker can serve a question end to end, part by part (`/api/v1/ready`).

`/api/v1/health` says the process answers; readiness says a question sent here would get an answer: the worker
is not draining, the database answers, the channel layer carries a message to this worker and back, the vector
store is open and searchable (a replica loaded, or the Qdrant server counting points), the LLM server
answers (or the worker runs offline) with each API the configuration uses (`LLM_BACKENDS`): `llm` for the chat
backend (`GET /models`), `llm_responses` for the Responses API, which llama.cpp's server, for one, lacks; and a
network embedder embeds (`embedder`: a stopped one is named, though questions are then answered from BM25 alone).
A proxy's health check or Kubernetes' readiness probe points at it, so traffic goes only to workers that can
serve it.

Every check has its own timeout and they run side by side, so a probe answers within `CHECK_TIMEOUT_SECONDS`
whatever is down. Checks that block (the database, the store) run on two threads of their own, never on the
event loop, and a check still stuck from the previous probe is reported as stuck instead of piling up threads.
The LLM server's answer is kept for `LLM_CHECK_TTL_SECONDS`, so probes do not add load to it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connections

from chatbot import lifecycle
from rag.replica import runtime_store

__all__ = ["CHECK_TIMEOUT_SECONDS", "Check", "readiness"]

CHECK_TIMEOUT_SECONDS = 2.0
LLM_CHECK_TTL_SECONDS = 5.0

_executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="readiness")
_in_flight: dict[str, Future[Any]] = {}  # blocking checks still running, by name
_llm_memo: dict[str, tuple[float, Check]] = {}  # the LLM checks' last findings, by check


class NotReady(Exception):
    """A check's finding: the part cannot serve, and why (said to the operator as is)."""


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    detail: str
    ms: float

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "detail": self.detail, "ms": round(self.ms, 1)}


async def _blocking(name: str, fn: Callable[[], str]) -> str:
    """Run `fn` on the readiness threads; a previous run of the same check that has not returned is a failure."""
    previous = _in_flight.get(name)
    if previous is not None and not previous.done():
        raise NotReady(f"its previous check has not returned for over {CHECK_TIMEOUT_SECONDS:g} s")
    future = _executor.submit(fn)
    _in_flight[name] = future
    return await asyncio.wrap_future(future)


def _database() -> str:
    connection = connections["default"]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        connection.close()  # a probe thread keeps no connection: the next probe sees the server as it is then
    return f"{connection.vendor} answers"


async def check_database() -> str:
    return await _blocking("database", _database)


async def check_channel_layer() -> str:
    layer = get_channel_layer()
    if layer is None:
        raise NotReady("no channel layer is configured")
    channel = await layer.new_channel()
    await layer.send(channel, {"type": "ready.probe", "token": uuid.uuid4().hex})
    await layer.receive(channel)
    return f"{type(layer).__name__} carried a message"


def _store_state(store: Any) -> str:
    if getattr(store, "use_memory", False):
        replica = store.replica()
        if replica is None:
            store.sync()  # nothing loaded yet: try now (the replica task does this too)
            replica = store.replica()
        points = store.replica_points()
        if replica is None or not points:
            raise NotReady("the index is empty: run `manage.py reindex`")
        return f"replica of {replica[0]} loaded ({points} points)"
    points = store.count()
    if points == 0:
        raise NotReady("the index is empty: run `manage.py reindex`")
    return f"server answers ({points} points)"


async def check_store() -> str:
    try:
        store = await runtime_store()
    except Exception as exc:
        raise NotReady(f"cannot open the vector store: {exc}") from exc
    if store is None:
        raise NotReady("the pipeline has no vector store")
    return await _blocking("store", lambda: _store_state(store))


async def _probe(base_url: str, api_key: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """One request of a readiness check to a model server, outside the call policy on purpose: a probe takes no
    slot and is never retried."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(timeout=CHECK_TIMEOUT_SECONDS) as client:
        try:
            return await client.request(method, base_url.rstrip("/") + path, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise NotReady(f"{base_url} does not answer ({type(exc).__name__})") from exc


async def _llm_request(method: str, path: str, **kwargs: Any) -> httpx.Response:
    base_url = settings.LLM_BASE_URL
    response = await _probe(base_url, settings.LLM_API_KEY, method, path, **kwargs)
    if response.status_code in (401, 403):
        raise NotReady(f"{base_url} refuses our key (HTTP {response.status_code})")
    if response.status_code >= 500:
        raise NotReady(f"{base_url} answers HTTP {response.status_code}")
    return response


async def _llm_reachable() -> str:
    """The chat backend: the server answers `GET /models`."""
    if not settings.LLM_BASE_URL:
        return "offline answers (no LLM_BASE_URL)"
    await _llm_request("GET", "/models")
    return f"{settings.LLM_BASE_URL} answers"


async def _responses_api() -> str:
    """The responses backend: the server has `POST /responses`. An empty body costs no generation: a server with
    the API refuses it as a bad request (400/422), one without says 404 (or 405)."""
    response = await _llm_request("POST", "/responses", json={})
    if response.status_code in (404, 405):
        raise NotReady(
            f"{settings.LLM_BASE_URL} has no Responses API (POST /responses: HTTP {response.status_code}): the "
            "responses backend (/api/v1/rag/ask/stream, model `responses` on /v1) cannot answer; set "
            "LLM_BACKENDS=chat if this deployment does not serve it"
        )
    return f"{settings.LLM_BASE_URL} has the Responses API"


async def _remembered(name: str, check: Callable[[], Awaitable[str]]) -> str:
    """``check``'s finding, kept `LLM_CHECK_TTL_SECONDS` so probes do not each knock on the LLM server."""
    memo = _llm_memo.get(name)
    if memo is not None and time.monotonic() - memo[0] < LLM_CHECK_TTL_SECONDS:
        if memo[1].ok:
            return memo[1].detail
        raise NotReady(memo[1].detail)
    found = await _timed(check)
    _llm_memo[name] = (time.monotonic(), found)
    if not found.ok:
        raise NotReady(found.detail)
    return found.detail


async def check_llm() -> str:
    return await _remembered("llm", _llm_reachable)


async def check_llm_responses() -> str:
    return await _remembered("llm_responses", _responses_api)


async def _embedder_answers() -> str:
    """A network embedder embeds one word (what the retriever needs of it: a `/models` list proves nothing).
    While it cannot, questions are still answered, from BM25 alone (rag.retrieval.breaker)."""
    base_url = settings.EMBEDDING_BASE_URL
    if not base_url:
        return "local model" if settings.SENTENCE_TRANSFORMERS_MODEL else "offline lexical embedding"
    url = base_url.rstrip("/") + "/embeddings"
    body = {"model": settings.EMBEDDING_MODEL, "input": ["ready"], "encoding_format": "float"}
    try:
        response = await _probe(base_url, settings.EMBEDDING_API_KEY, "POST", "/embeddings", json=body)
    except NotReady as exc:
        raise NotReady(f"{exc}: searches run on BM25 alone") from exc
    if response.status_code >= 400:
        raise NotReady(f"{url} answers HTTP {response.status_code}: searches run on BM25 alone")
    return f"{url} embeds"


async def check_embedder() -> str:
    return await _remembered("embedder", _embedder_answers)


async def _timed(check: Callable[[], Awaitable[str]]) -> Check:
    started = time.perf_counter()
    try:
        detail = await asyncio.wait_for(check(), timeout=CHECK_TIMEOUT_SECONDS)
        ok = True
    except TimeoutError:
        ok, detail = False, f"no answer within {CHECK_TIMEOUT_SECONDS:g} s"
    except NotReady as exc:
        ok, detail = False, str(exc)
    except Exception as exc:
        ok, detail = False, f"{type(exc).__name__}: {exc}"
    return Check(ok, detail, (time.perf_counter() - started) * 1000)


CHECKS: dict[str, Callable[[], Awaitable[str]]] = {
    "database": check_database,
    "channel_layer": check_channel_layer,
    "store": check_store,
    "llm": check_llm,
    "llm_responses": check_llm_responses,
    "embedder": check_embedder,
}


def _used() -> list[str]:
    """The checks of what this configuration uses: the LLM APIs only with an LLM server, and each backend's API
    only when `LLM_BACKENDS` names it (the chat one is `llm`, which also says whether the worker runs offline)."""
    backends = settings.LLM_BACKENDS
    skipped = set() if settings.LLM_BASE_URL and "responses" in backends else {"llm_responses"}
    return [name for name in CHECKS if name not in skipped]


async def readiness() -> dict[str, Check]:
    """Every used part's check, run side by side; `draining` first, failing while the worker drains."""
    names = _used()
    results = await asyncio.gather(*(_timed(CHECKS[name]) for name in names))
    checks = dict(zip(names, results, strict=True))
    left = lifecycle.seconds_left()
    draining = (
        Check(True, "serving", 0.0)
        if left is None
        else Check(False, f"draining before a stop ({left:.0f} s of the window left)", 0.0)
    )
    return {"lifecycle": draining, **checks}


def reset_for_tests() -> None:
    _llm_memo.clear()
    _in_flight.clear()
