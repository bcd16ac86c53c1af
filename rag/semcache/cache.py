"""`SemanticCache`: answers to context-free questions, found again by the embedding of a close enough question.

The pipeline reaches it through `deps.cache` (see rag.nodes.cache_lookup / cache_store). A lookup embeds the
normalised question and searches the entries of one scope (language, live index version, answer prompt version,
producer: the backend, model and workflow that wrote the answer) for live entries above `threshold`; the best
candidates then pass the false-hit guard (rag.semcache.guard), and the first that agrees with the question is a
hit.

The index version (`rag.retrieval.store.IndexVersion`) survives incremental reindexing: an entry stays servable
across reindexes that leave the documents it cites alone. Each entry keeps the generation of the build its answer
was retrieved from, and a candidate citing a document re-indexed or deleted since is never served (whichever
process ran the reindex); the re-index hook and the purge delete such entries. A network embedder's query vector is
awaited on the event loop (no thread waits on its round trip); the rest of the lookup (a CPU embedding, scoring,
a Qdrant server's blocking client) is one hop to a small executor of the cache's own, so a slow store can never
take the default executor's threads from everything else.

An entry names its producer (`producer_of`): after a change of model, backend or workflow, and with the answer
prompt's version for a prompt change, old answers are misses at once and the purge deletes them.

Nothing the hit path does touches the database: the answer and its sources are in the vector's payload, and hits
are counted in memory and written in batches by the writer thread (the project's `WriterThread`, started at the
first store or hit). Stores are queued (bounded; a full queue drops the store and counts it) and written by the
same thread in batches, vectors first and then rows, so the end of a stream never waits for them. The thread also
flushes hit counters every `flush_interval` seconds and purges expired, stale and orphaned entries every
`purge_interval` seconds (and as soon as lookups see a new index version).

Defaults were measured on hand-written paraphrases of the demo help centre (docs/benchmarks/semantic_cache.md):
with the offline lexical embedding, `threshold` 0.65 keeps 94% of the paraphrases of one set and 91% of a
held-out one, with no wrong answer served on either once the guard has looked.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from django.db import close_old_connections

from infra.writer_thread import WriterThread
from rag.retrieval.embedding import AsyncEmbedder, Embedder
from rag.retrieval.store import IndexVersion
from rag.rules.terms import strip_question_words
from rag.semcache.active import activate, deactivate
from rag.semcache.db_index import DatabaseCacheIndex
from rag.semcache.guard import DEFAULT_KEY_TERMS, REASONS, KeyTerms, disagreement, features, question_normalize
from rag.semcache.index import CacheIndex, QdrantCacheIndex
from rag.semcache.selectors import cache_entry_ids_existing
from rag.semcache.services import (
    NewEntry,
    cache_entries_delete,
    cache_entries_purge,
    cache_entry_hits_record,
)

logger = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 0.65
DEFAULT_TTL_SECONDS = 24 * 3600.0
# "other" is left out: such questions are translated before the search, and one English key would then serve an
# answer written in Japanese to someone who asked in Vietnamese.
CACHED_LANGUAGES = ("zh-hant", "zh-hans", "en")
OFFLINE_PROMPT_VERSION = "offline"
ANSWER_PROMPT = "unified-agent-system"
_DUPLICATE_SCORE = 0.999

PromptVersion = Callable[[], Awaitable[str]]
# the producers this deployment answers with now; None while unknown (nothing is purged for its producer then)
Producers = Callable[[], Collection[str] | None]
LOOKUP_THREADS = 4


def embed_key(normalized: str) -> str:
    """The text embedded for a normalised question: without Chinese question scaffolding (請問, 如何, 怎麼, 嗎).

    Measured on the paraphrase set: the median similarity of paraphrases goes from 0.72 to 0.89, so one threshold
    keeps far more of them; what scaffolding used to tell apart ("為什麼" vs "怎麼辦") the guard checks.
    """
    return strip_question_words(normalized) or normalized


class IndexVersionSource(Protocol):
    def get(self) -> IndexVersion | None:
        """The live index version now (blocking); None before the first index build."""
        ...

    def peek(self) -> IndexVersion | None:
        """The last version seen, without blocking (None if unknown)."""
        ...


class LiveIndexVersion:
    """The store's live `IndexVersion`, re-read at most every `ttl` seconds: one alias read (a server answers
    over HTTP), plus the build's metadata once per switch."""

    def __init__(self, store: Any, *, ttl: float = 1.0) -> None:
        self._store = store
        self._ttl = ttl
        self._value: IndexVersion | None = None
        self._read_at = float("-inf")

    def get(self) -> IndexVersion | None:
        now = time.monotonic()
        if now - self._read_at >= self._ttl:
            self._value = self._store.index_version()
            self._read_at = now
        return self._value

    def peek(self) -> IndexVersion | None:
        return self._value


def static_prompt_version(version: str) -> PromptVersion:
    async def get() -> str:
        return version

    return get


def registry_prompt_version(prompts: Any, name: str = ANSWER_PROMPT) -> PromptVersion:
    """The version of the answer prompt the pipeline uses now (`deps.prompts`: memory, a thread hop when stale)."""

    async def get() -> str:
        snapshot = await prompts.get(name)
        return f"{snapshot.name}@{snapshot.version}"

    return get


@dataclass(frozen=True, slots=True)
class _StoreJob:
    question: str
    normalized: str
    language: str
    answer: str
    sources: list[dict[str, Any]]
    doc_ids: list[str]
    prompt_version: str
    index_version: IndexVersion | None
    producer: str
    vector: list[float] | None  # a network embedder's vector, awaited on the loop; None: embed in the writer


class SemanticCache:
    def __init__(
        self,
        *,
        index: CacheIndex,
        embedder: Embedder,
        index_version: IndexVersionSource,
        prompt_version: PromptVersion | None = None,
        threshold: float = DEFAULT_THRESHOLD,
        ttl: float = DEFAULT_TTL_SECONDS,
        candidates: int = 3,
        key_terms: KeyTerms = DEFAULT_KEY_TERMS,
        languages: Sequence[str] = CACHED_LANGUAGES,
        max_entries: int = 20_000,
        max_pending_writes: int = 256,
        write_batch: int = 32,
        flush_interval: float = 5.0,
        purge_interval: float = 900.0,
        orphan_grace: float = 120.0,
        producers: Producers | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        if ttl <= 0 or candidates < 1 or max_entries < 1 or max_pending_writes < 1 or write_batch < 1:
            raise ValueError("ttl, candidates, max_entries, max_pending_writes and write_batch must be positive")
        self.index = index
        self.embedder = embedder
        self.threshold = threshold
        self.ttl = ttl
        self._versions = index_version
        self._prompt_version = prompt_version or static_prompt_version(OFFLINE_PROMPT_VERSION)
        self._candidates = candidates
        self._key_terms = key_terms
        self._languages = frozenset(languages)
        self._max_entries = max_entries
        self._write_batch = write_batch
        self._flush_interval = flush_interval
        self._purge_interval = purge_interval
        self._orphan_grace = orphan_grace
        self._producers = producers
        self._clock = clock
        self._executor = ThreadPoolExecutor(max_workers=LOOKUP_THREADS, thread_name_prefix="semantic-cache")
        self._writer: WriterThread[_StoreJob] = WriterThread(
            name="semantic-cache-writer",
            queue_size=max_pending_writes,
            handle_batch=self._write,
            batch_size=write_batch,
            tick=self._background_work,
            tick_after=min(flush_interval, purge_interval),
            # CONN_MAX_AGE = 0 is honoured per unit of work, as a request would.
            after=_close_old_connections,
            start=False,
        )
        # When the writer's tick next flushes and purges (monotonic); its first call counts both from the writer's
        # start (`started_at`). Only the writer thread touches them.
        self._next_flush: float | None = None
        self._next_purge = 0.0
        # Counters and pending hits are touched from lookup threads, the writer thread and stats readers.
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._rejections: Counter[str] = Counter()
        self._pending_hits: dict[str, tuple[int, float]] = {}
        self._last_purge: float | None = None
        self._purged_for: IndexVersion | None = None  # the index version the last purge ran under

    # --- the pipeline's protocol (rag.nodes.cache_lookup / cache_store) ----------------------------------------

    def set_producers(self, producers: Producers) -> None:
        """Where the purge learns which producers are configured now (the runtime, once it is built)."""
        self._producers = producers

    async def lookup(self, question: str, *, language: str, producer: str = "") -> dict[str, Any] | None:
        """{"answer", "sources"} of a live entry close enough to `question` that the guard accepts, or None."""
        if language not in self._languages or not question.strip():
            return None
        try:
            prompt_version = await self._prompt_version()
            normalized = question_normalize(question)
            vector = await self._network_vector(normalized)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                self._executor, self._lookup_sync, normalized, language, prompt_version, producer, vector
            )
        except Exception:
            self._count("errors")
            raise  # cache_lookup logs it and answers the long way

    async def _network_vector(self, normalized: str) -> list[float] | None:
        if isinstance(self.embedder, AsyncEmbedder):
            return await self.embedder.aembed_query(embed_key(normalized))
        return None

    async def store(
        self, question: str, *, language: str, answer: str, sources: list[dict[str, Any]], producer: str = ""
    ) -> None:
        """Queue a grounded answer for the writer thread and return at once (a full queue drops it)."""
        doc_ids = sorted({str(s.get("doc_id")) for s in sources if s.get("doc_id")})
        if language not in self._languages or not answer.strip() or not question.strip() or not doc_ids:
            self._count("store_skipped")  # only answers that cite documents are worth repeating
            return
        try:
            prompt_version = await self._prompt_version()
        except Exception:
            self._count("errors")
            raise
        normalized = question_normalize(question)
        vector = await self._network_vector(normalized)
        job = _StoreJob(
            question=question,
            normalized=normalized,
            language=language,
            answer=answer,
            sources=[dict(s) for s in sources],
            doc_ids=doc_ids,
            prompt_version=prompt_version,
            # the version this request's lookup just saw, i.e. the index the answer was retrieved from
            index_version=self._versions.peek(),
            producer=producer,
            vector=vector,
        )
        self._writer.start()
        if not self._writer.submit(job) and not self._writer.closed:
            self._count("store_dropped")
            logger.warning("semantic cache: %d writes pending, an answer was not cached", self._writer.queue_size)

    # --- lookups -----------------------------------------------------------------------------------------------

    def _lookup_sync(
        self, normalized: str, language: str, prompt_version: str, producer: str, vector: list[float] | None
    ) -> dict[str, Any] | None:
        index_version = self._versions.get()
        if index_version is None:
            self._count("misses")
            return None
        if vector is None:
            vector = self.embedder.embed_query(embed_key(normalized))
        candidates = [
            candidate
            for candidate in self.index.search(
                vector,
                (language, index_version.version, prompt_version, producer),
                now=self._clock(),
                limit=self._candidates,
                threshold=self.threshold,
            )
            # cites a document re-indexed or deleted since: the hook or the purge is deleting it
            if not _outdated(candidate.payload, index_version)
        ]
        if not candidates:
            self._count("misses")
            return None
        asked = features(normalized, self._key_terms)
        first_reason = ""
        for candidate in candidates:
            reason = disagreement(asked, candidate.features)
            if reason is None:
                self._record_hit(candidate.entry_id)
                payload = candidate.payload
                return {
                    "answer": str(payload.get("answer", "")),
                    "sources": [dict(s) for s in payload.get("sources") or []],
                }
            first_reason = first_reason or reason
        with self._lock:
            self._counts["misses"] += 1
            self._counts["guard_rejections"] += 1
            self._rejections[first_reason] += 1
        logger.debug("semantic cache: %d candidates rejected by the guard (%s)", len(candidates), first_reason)
        return None

    def _record_hit(self, entry_id: str) -> None:
        now = self._clock()
        with self._lock:
            self._counts["hits"] += 1
            count, _ = self._pending_hits.get(entry_id, (0, now))
            self._pending_hits[entry_id] = (count + 1, now)
        self._writer.start()  # it flushes the counters

    # --- the writer thread -------------------------------------------------------------------------------------

    def _background_work(self, stopping: bool) -> float:
        """The writer's tick: hit counters every `flush_interval` and as it stops, the purge every `purge_interval`
        or as soon as the index moved; returns the seconds until the next is due."""
        if self._next_flush is None:
            started = self._writer.started_at
            assert started is not None  # a tick runs on the writer's own thread, so after its start
            self._next_flush = started + self._flush_interval
            self._next_purge = started + self._purge_interval
        now = time.monotonic()
        if now >= self._next_flush or stopping:
            self.flush_hits()
            self._next_flush = now + self._flush_interval
        if now >= self._next_purge or self._index_moved():
            self.purge()
            self._next_purge = now + self._purge_interval
        return max(0.0, min(self._next_flush, self._next_purge) - time.monotonic())

    def _write(self, batch: Sequence[_StoreJob]) -> None:
        now = self._clock()
        current = self._versions.get()
        entries: list[NewEntry] = []
        vectors: list[Sequence[float]] = []
        payloads: list[dict[str, Any]] = []
        seen: set[tuple[str, ...]] = set()
        room = self._max_entries - self.index.known_size()
        for job in batch:
            # the version this answer was retrieved at; it is stored only if the live index would still give it
            seen_at = job.index_version or current
            version = seen_at.version if seen_at else ""
            scope = (job.language, version, job.prompt_version, job.producer, job.normalized)
            if (
                seen_at is None
                or current is None
                or seen_at.version != current.version
                or current.outdated(job.doc_ids, seen_at.generation)
                or scope in seen
            ):
                self._count("store_skipped")
                continue
            vector = job.vector if job.vector is not None else self.embedder.embed_query(embed_key(job.normalized))
            if self._is_stored(vector, job, seen_at.version, now):
                self._count("store_skipped")  # asked twice before the first answer was cached
                continue
            if len(entries) >= room:
                self._count("store_full")
                continue
            seen.add(scope)
            entry = NewEntry(
                entry_id=str(uuid.uuid4()),
                question=job.question,
                normalized_question=job.normalized,
                answer=job.answer,
                language=job.language,
                sources=job.sources,
                doc_ids=job.doc_ids,
                index_version=seen_at.version,
                prompt_version=job.prompt_version,
                created_at=now,
                expires_at=now + self.ttl,
                producer=job.producer,
                index_generation=seen_at.generation,
            )
            entries.append(entry)
            vectors.append(vector)
            payloads.append(_payload(entry))
        if not entries:
            return
        try:
            self.index.add(entries, vectors, payloads)
        except Exception:
            self._count("errors", len(entries))
            raise
        self._count("stores", len(entries))

    def _is_stored(self, vector: Sequence[float], job: _StoreJob, index_version: str, now: float) -> bool:
        same = self.index.search(
            vector,
            (job.language, index_version, job.prompt_version, job.producer),
            now=now,
            limit=1,
            threshold=_DUPLICATE_SCORE,
        )
        return bool(same) and same[0].payload.get("normalized_question") == job.normalized

    def _index_moved(self) -> bool:
        """Whether lookups have seen another live index version than the last purge did (a reindex): its
        outdated entries are then deleted at once rather than at the next timed purge."""
        seen = self._versions.peek()
        return seen is not None and seen != self._purged_for

    def flush_hits(self) -> int:
        """Write the counted hits to the database in one transaction; returns entries updated. Blocking."""
        with self._lock:
            pending, self._pending_hits = self._pending_hits, {}
        if not pending:
            return 0
        try:
            return cache_entry_hits_record(hits=pending)
        except Exception:
            with self._lock:  # keep them for the next flush
                for entry_id, (count, last) in pending.items():
                    more, newest = self._pending_hits.get(entry_id, (0, last))
                    self._pending_hits[entry_id] = (count + more, max(last, newest))
            self._count("errors")
            raise

    def purge(self) -> int:
        """Delete expired entries, entries of another index version or citing documents re-indexed since their
        answer, and orphans (a vector without its row or the reverse, older than `orphan_grace`); returns how
        many went. Blocking."""
        now = self._clock()
        version = self._versions.get()
        self._purged_for = version
        producers = self._producers() if self._producers is not None else None
        stale = self.index.ids_matching(
            expired_at=now, not_index_version=version.version if version else "", producers=producers
        )
        stale.update(
            cache_entries_purge(now=now, index_version=version.version if version else None, producers=producers)
        )
        self.forget(stale)
        if version is not None and version.changed:
            # still in scope, but citing a document re-indexed since (the reindex ran where no hook saw it)
            outdated = self.index.ids_matching(outdated=lambda payload: _outdated(payload, version)) - stale
            cache_entries_delete(ids=outdated, cache=self)
            stale |= outdated
        vectors = self.index.ids()
        settled = {entry_id for entry_id, created in vectors.items() if created < now - self._orphan_grace}
        orphans = settled - cache_entry_ids_existing(ids=settled)
        self.forget(orphans)
        rows_alone = self.index.rows_without_vectors(before=now - self._orphan_grace, vectors=vectors.keys())
        cache_entries_delete(ids=rows_alone, cache=self)
        purged = len(stale) + len(orphans) + len(rows_alone)
        with self._lock:
            self._counts["purged"] += purged
            self._last_purge = now
        if purged:
            logger.info(
                "semantic cache purge: %d stale, %d orphaned vectors, %d rows without vectors",
                len(stale),
                len(orphans),
                len(rows_alone),
            )
        return purged

    # --- entries removed elsewhere (rag.semcache.services) ------------------------------------------------------

    def forget(self, entry_ids: Sequence[str] | set[str]) -> None:
        """Drop the vectors (and uncounted hits) of entries whose rows are being deleted. Blocking."""
        ids = set(entry_ids)
        if not ids:
            return
        with self._lock:
            for entry_id in ids:
                self._pending_hits.pop(entry_id, None)
        self.index.delete(ids)

    def forget_all(self) -> None:
        with self._lock:
            self._pending_hits.clear()
        self.index.clear()

    def supersede(self, vector: Sequence[float], normalized: str, language: str) -> int:
        """Delete the live entries of `language` (any scope) whose question a curated answer now covers: close
        enough to its question (`normalized`, embedded as `vector`) and agreed by the guard. How many went.
        Blocking."""
        candidates = self.index.search_language(vector, language, now=self._clock(), limit=50, threshold=self.threshold)
        asked = features(normalized, self._key_terms)
        covered = [c.entry_id for c in candidates if disagreement(asked, c.features) is None]
        if covered:
            cache_entries_delete(ids=covered, cache=self)
        return len(covered)

    def ids_citing(self, doc_ids: Sequence[str]) -> set[str]:
        return self.index.ids_matching(doc_ids=doc_ids)

    # --- life cycle and reporting ------------------------------------------------------------------------------

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Block until every queued store is written (tests, benchmarks, shutdown); False on timeout."""
        return self._writer.drain(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued, flush the hit counters and stop the writer thread (deps.close() calls this).

        Closing again is harmless: the writer, already closed, returns at once and the rest is idempotent too."""
        if not self._writer.close(timeout):
            logger.warning("semantic cache: writer did not drain in %.1fs; queued answers are lost", timeout)
        self._executor.shutdown(wait=False)
        deactivate(self)

    def stats(self) -> dict[str, Any]:
        """Counters for the console (quick, thread-safe, JSON-serialisable)."""
        with self._lock:
            counts = dict(self._counts)
            rejections = {reason: self._rejections.get(reason, 0) for reason in REASONS}
            pending_hits = sum(count for count, _ in self._pending_hits.values())
            last_purge = self._last_purge
        hits, misses = counts.get("hits", 0), counts.get("misses", 0)
        return {
            "entries": self.index.known_size(),
            "hits": hits,
            "misses": misses,
            "hit_rate": round(hits / (hits + misses), 4) if hits + misses else None,
            "guard_rejections": counts.get("guard_rejections", 0),
            "guard_rejections_by_reason": rejections,
            "stores": counts.get("stores", 0),
            "store_skipped": counts.get("store_skipped", 0),
            "store_dropped": counts.get("store_dropped", 0),
            "store_full": counts.get("store_full", 0),
            "errors": counts.get("errors", 0),
            "purged": counts.get("purged", 0),
            "pending_writes": self._writer.pending,
            "pending_hits": pending_hits,
            "last_purge_at": last_purge,
            "threshold": self.threshold,
            "ttl_seconds": self.ttl,
        }

    def _count(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] += amount


def _close_old_connections() -> None:
    close_old_connections()


def _outdated(payload: dict[str, Any], version: IndexVersion) -> bool:
    """Whether an entry cites a document re-indexed or deleted after the build its answer came from (entries
    written before generations were stored count as generation 0: any change in the lineage outdates them)."""
    generation = payload.get("index_generation")
    since = generation if isinstance(generation, int) else 0
    return version.outdated((str(d) for d in payload.get("doc_ids") or ()), since)


def _payload(entry: Any) -> dict[str, Any]:
    return {
        "entry_id": entry.entry_id,
        "language": entry.language,
        "index_version": entry.index_version,
        "index_generation": entry.index_generation,
        "producer": entry.producer,
        "prompt_version": entry.prompt_version,
        "created_at": entry.created_at,
        "expires_at": entry.expires_at,
        "doc_ids": entry.doc_ids,
        "question": entry.question,
        "normalized_question": entry.normalized_question,
        "answer": entry.answer,
        "sources": entry.sources,
    }


def build_semantic_cache(
    store: Any,
    embedder: Embedder,
    *,
    prompts: Any = None,
    prompt_version: PromptVersion | None = None,
    key_terms: KeyTerms = DEFAULT_KEY_TERMS,
    index_version_ttl: float = 1.0,
    **options: Any,
) -> SemanticCache:
    """The process's cache beside the `VectorStore`: in the database when the store is (the entries' rows hold
    their vectors), else in a Qdrant collection ``<alias>_semcache`` through the store's own client. Blocking: call
    it where the store is opened (`build_deps`, off the event loop).

    `prompts` is `deps.prompts`: entries are tagged with the answer prompt's production version, and None
    (offline) tags them "offline"; `prompt_version` replaces that source. `options` go to `SemanticCache`
    (threshold, ttl, max_entries, flush_interval, purge_interval, clock...).
    """
    index: CacheIndex
    if store.backend.kind == "database":
        index = DatabaseCacheIndex(dim=embedder.dim, embedder_name=embedder.name, key_terms=key_terms)
    else:
        index = QdrantCacheIndex(
            store.client,
            f"{store.alias}_semcache",
            dim=embedder.dim,
            embedder_name=embedder.name,
            mirror=bool(store.use_memory),
            local=bool(store.local),
            key_terms=key_terms,
        )
    index.open()
    cache = SemanticCache(
        index=index,
        embedder=embedder,
        index_version=LiveIndexVersion(store, ttl=index_version_ttl),
        prompt_version=prompt_version or (registry_prompt_version(prompts) if prompts is not None else None),
        key_terms=key_terms,
        **options,
    )
    activate(cache)
    return cache
