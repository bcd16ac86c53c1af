"""Index builds: documents -> chunks -> dense + BM25 vectors -> a new collection -> alias switch.

A build never touches the live collection: it writes `<alias>__<version>` and publishes it with one alias
operation at the end, so searches during a build see the previous index whole. A failed or cancelled build is
dropped. Every chunk keeps its document's `content_hash` and source in the payload, so the live build itself
says which documents a later reindex can reuse. BM25's avgdl (per language) is kept in the collection's metadata.

`build_index` embeds everything. `reindex` builds incrementally: documents whose content is unchanged have their
points copied with their vectors from the live build (no embedding), changed and new ones are chunked and
embedded, documents left out are gone from the new build; points can also be re-embedded from their stored text
(a full rebuild of documents whose source is not at hand). `describe_points` adds backfilled descriptions to
live points as extra searchable text.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rag.retrieval.build_writer import (
    BuildItem,
    BuildSteps,
    IndexCancelled,
    Progress,
    SparseSide,
    embed_batch,
    write_items,
)
from rag.retrieval.chunking import Chunk, ChunkingConfig, _same_words, chunk_document
from rag.retrieval.embedding import Embedder
from rag.retrieval.markdown import Document
from rag.retrieval.sparse import TOKENIZER_NAME, BM25Encoder
from rag.retrieval.store import Engine, IndexVersion, StorePoint, VectorStore

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
# point ids are UUIDs derived from chunk ids: rebuilding the same corpus gives the same ids
_POINT_NAMESPACE = uuid.UUID("6f1d3c55-6a0e-4a53-9f3e-2b8f0c9a4d71")
_NAMESPACE_BYTES = _POINT_NAMESPACE.bytes
_HEADING_SEPARATOR = ChunkingConfig().heading_separator


@dataclass(frozen=True, slots=True)
class IndexReport:
    documents: int
    chunks: int
    seconds: float
    collection: str
    replaced: str | None
    avgdl: float


def point_id(chunk_id: str) -> str:
    """`str(uuid.uuid5(_POINT_NAMESPACE, chunk_id))`, without building a `UUID` (a third of the cost per chunk)."""
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + chunk_id.encode("utf-8"), usedforsecurity=False).digest())
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC 4122 variant
    hexed = digest[:16].hex()
    return f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}"


def chunk_context(chunk: Chunk) -> str:
    # chunk_document builds embed_text as "<title > headings>\n<text>"; titles and headings are single lines
    return chunk.embed_text.split("\n", 1)[0]


def chunk_payload(chunk: Chunk, *, source: str = "") -> dict[str, Any]:
    return {
        "chunk_id": chunk.chunk_id,
        "doc_id": chunk.doc_id,
        "ordinal": chunk.ordinal,
        "title": chunk.title,
        "url": chunk.url,
        "heading": chunk.heading,
        "text": chunk.text,
        "context": chunk_context(chunk),
        "language": chunk.language,
        "kind": chunk.kind,
        "form_id": chunk.form_id,
        "form_file": chunk.form_file,
        "tags": list(chunk.tags),
        "content_hash": chunk.content_hash,
        "source": source,
    }


ChunkingChoice = ChunkingConfig | Callable[[Document], ChunkingConfig] | None


def chunk_documents(documents: Sequence[Document], config: ChunkingChoice = None) -> list[Chunk]:
    """Chunks of every document; `config` may be one config or a function choosing one per document (a SQuAD
    paragraph is chunked differently from an article)."""
    if config is None or isinstance(config, ChunkingConfig):
        fixed = config or ChunkingConfig()
        return [chunk for document in documents for chunk in chunk_document(document, fixed)]
    return [chunk for document in documents for chunk in chunk_document(document, config(document))]


def open_store(
    alias: str,
    *,
    path: Path | str | None = None,
    url: str = "",
    api_key: str = "",
    engine: Engine = "auto",
) -> VectorStore:
    """The store named by settings-like values (a server when `url`, else local mode in `path`)."""
    return VectorStore.open(alias, path=path, url=url, api_key=api_key, engine=engine)


def _bm25_metadata(encoder: BM25Encoder, avgdl: float, avgdl_by_language: Mapping[str, float]) -> dict[str, Any]:
    return {
        "k1": encoder.params.k1,
        "b": encoder.params.b,
        "avgdl": avgdl,
        "avgdl_by_language": dict(avgdl_by_language),
        "tokenizer": TOKENIZER_NAME,
    }


def _build_metadata(
    embedder: Embedder,
    encoder: BM25Encoder,
    avgdl: float,
    avgdl_by_language: Mapping[str, float],
    *,
    documents: int,
    chunks: int,
) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "embedder": embedder.name,
        "dim": embedder.dim,
        "bm25": _bm25_metadata(encoder, avgdl, avgdl_by_language),
        "documents": documents,
        "chunks": chunks,
        "built_at": datetime.now(UTC).isoformat(),
    }


def _write_and_switch(store: VectorStore, collection: str, write: Callable[[], None]) -> str | None:
    """Fill the new build with `write()` and make it live; returns the build it replaced. A failure, or
    `IndexCancelled` from `write`, drops the new build and leaves the live one as it was."""
    try:
        write()
        return store.activate(collection)
    except BaseException as exc:
        if isinstance(exc, IndexCancelled):
            logger.info("index build %s cancelled; dropping it", collection)
        else:
            logger.exception("index build %s failed; dropping it", collection)
        _drop_quietly(store, collection)
        raise


def build_index(
    documents: Sequence[Document],
    store: VectorStore,
    embedder: Embedder,
    *,
    config: ChunkingConfig | None = None,
    encoder: BM25Encoder | None = None,
    batch_size: int = 256,
    progress: Progress | None = None,
) -> IndexReport:
    """Write every document into a new build and make it live. `progress(done, total)` is called per batch."""
    started = time.perf_counter()
    if not documents:
        # an empty build would replace a good index with nothing: almost always a wrong path
        raise ValueError("no documents to index")
    encoder = encoder or BM25Encoder()
    chunks = chunk_documents(documents, config)
    sources = {document.doc_id: document.source_path for document in documents}
    items = [
        BuildItem(
            point_id(chunk.chunk_id), chunk_payload(chunk, source=sources.get(chunk.doc_id, "")), chunk.embed_text
        )
        for chunk in chunks
    ]
    sparse = SparseSide(encoder, items)
    avgdl, avgdl_by_language = sparse.average(), sparse.averages()
    sparse.weigh(avgdl_by_language, avgdl)
    metadata = _build_metadata(
        embedder, encoder, avgdl, avgdl_by_language, documents=len(documents), chunks=len(chunks)
    )
    collection = store.create_build(dim=embedder.dim, metadata=metadata)
    steps = BuildSteps(len(items), progress, None)
    replaced = _write_and_switch(
        store,
        collection,
        lambda: write_items(store, collection, embedder, items, sparse, batch_size=batch_size, advance=steps.advance),
    )
    seconds = time.perf_counter() - started
    logger.info(
        "indexed %d documents into %d chunks in %.2fs as %s (replaced %s)",
        len(documents),
        len(chunks),
        seconds,
        collection,
        replaced,
    )
    return IndexReport(len(documents), len(chunks), seconds, collection, replaced, avgdl)


def _drop_quietly(store: VectorStore, collection: str) -> None:
    try:
        store.drop(collection)
    except Exception:
        logger.exception("could not drop the unpublished build %s", collection)


# --- what the live build holds ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LiveDocument:
    doc_id: str
    content_hash: str
    source: str  # "" for builds made before sources were stored
    chunks: int


def live_documents(store: VectorStore) -> dict[str, LiveDocument]:
    """The documents of the live build (from its payloads), by doc_id; {} when there is none."""
    live = store.live_collection()
    if live is None:
        return {}
    found: dict[str, LiveDocument] = {}
    for point in store.scroll(live, payload=["doc_id", "content_hash", "source"]):
        payload = point.payload
        doc_id = str(payload.get("doc_id", ""))
        seen = found.get(doc_id)
        found[doc_id] = LiveDocument(
            doc_id=doc_id,
            content_hash=str(payload.get("content_hash", "")),
            source=str(payload.get("source", "") or ""),
            chunks=(seen.chunks if seen else 0) + 1,
        )
    return found


def build_compatible(metadata: Mapping[str, Any], embedder: Embedder, encoder: BM25Encoder) -> bool:
    """Whether points of a build with this metadata can be copied into a build made with `embedder`/`encoder`:
    the same vector space and the same BM25 tokens and parameters."""
    bm25 = metadata.get("bm25") or {}
    return (
        metadata.get("schema") == SCHEMA_VERSION
        and metadata.get("embedder") == embedder.name
        and metadata.get("dim") == embedder.dim
        and bm25.get("tokenizer") == TOKENIZER_NAME
        and bm25.get("k1") == encoder.params.k1
        and bm25.get("b") == encoder.params.b
    )


def stored_context(payload: Mapping[str, Any]) -> str:
    """The title/heading context a point was embedded with."""
    context = payload.get("context")
    if isinstance(context, str) and context:
        return context
    # builds made before the context was stored: rebuild it the way chunk_document does
    title = str(payload.get("title", ""))
    heading = str(payload.get("heading", ""))
    parts = heading.split(_HEADING_SEPARATOR) if heading else []
    if not parts or not _same_words(parts[0], title):
        parts.insert(0, title)
    return _HEADING_SEPARATOR.join(parts)


def with_descriptions(text: str, description_zh: str, description_en: str) -> str:
    """What is embedded for a described chunk: its text, then its descriptions (so a question in either
    language finds it)."""
    extra = [d.strip() for d in (description_zh, description_en) if d and d.strip()]
    return "\n".join([text, *extra])


def stored_embed_text(payload: Mapping[str, Any]) -> str:
    """The text a point is (re-)embedded from: context, chunk text and any backfilled descriptions."""
    return with_descriptions(
        f"{stored_context(payload)}\n{payload.get('text', '')}",
        str(payload.get("description_zh", "") or ""),
        str(payload.get("description_en", "") or ""),
    )


# --- incremental builds -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexedChunk:
    """One chunk of the new build, for the bookkeeping rows."""

    chunk_id: str
    doc_id: str
    ordinal: int
    point_id: str
    heading: str
    text: str
    description_zh: str = ""
    description_en: str = ""
    described_at: str = ""  # ISO time; "" while the chunk has no descriptions


def _indexed_chunk(point: str, payload: Mapping[str, Any]) -> IndexedChunk:
    return IndexedChunk(
        chunk_id=str(payload.get("chunk_id", point)),
        doc_id=str(payload.get("doc_id", "")),
        ordinal=int(payload.get("ordinal", 0) or 0),
        point_id=point,
        heading=str(payload.get("heading", "")),
        text=str(payload.get("text", "")),
        description_zh=str(payload.get("description_zh", "") or ""),
        description_en=str(payload.get("description_en", "") or ""),
        described_at=str(payload.get("described_at", "") or ""),
    )


_DOCUMENT_FIELDS = ("title", "url", "language", "tags", "kind", "form_id", "form_file", "content_hash", "source")


def _document_fields(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {key: payload.get(key) for key in _DOCUMENT_FIELDS}


@dataclass(frozen=True, slots=True)
class ReindexReport:
    collection: str
    replaced: str | None
    documents: int
    chunks: int
    embedded: int  # chunks of the given documents, chunked and embedded
    reencoded: int  # points embedded again from their stored text
    copied: int  # points copied with their vectors
    seconds: float
    chunks_by_doc: dict[str, list[IndexedChunk]] = field(default_factory=dict)
    # document-level payload fields (title, url, language, tags, kind, form_id, form_file, content_hash, source)
    document_fields: dict[str, dict[str, Any]] = field(default_factory=dict)


def reindex(
    store: VectorStore,
    embedder: Embedder,
    *,
    embed: Sequence[Document],
    copy: Collection[str] = (),
    reencode: Collection[str] = (),
    config: ChunkingChoice = None,
    encoder: BM25Encoder | None = None,
    batch_size: int = 128,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
    confirm_switch: Callable[[], bool] | None = None,
    allow_empty: bool = False,
) -> ReindexReport:
    """Build a new index from the live one and switch to it.

    The new build holds the chunks of the `embed` documents (chunked and embedded), the live points of the
    `copy` documents (with their vectors, no embedding), and the live points of the `reencode` documents
    embedded again from their stored text. Every other live document is left out, i.e. deleted. Copying needs
    a live build in the same vector space (`build_compatible`). A build that copies keeps the live build's index
    version (the semantic cache's scope) one generation further; one that copies nothing starts a new one.

    `should_stop()` is asked between batches (it may answer from a cache); `confirm_switch()` right before the
    switch (it should look, not guess). On a stop, or a switch not confirmed, the build is dropped and
    `IndexCancelled` raised. Any failure drops the build too: the live index is switched only when the new
    build is complete. An empty build is refused unless `allow_empty` (a job that deletes the last documents).
    Blocking; call it from a thread.
    """
    started = time.perf_counter()
    encoder = encoder or BM25Encoder()
    plan = _ReindexPlan.make(store, embedder, encoder, embed=embed, copy=copy, reencode=reencode)
    chunks = chunk_documents(embed, config)
    scan = _scan_live(store, plan, new_chunk_ids={chunk.chunk_id for chunk in chunks})
    # re-encoded points first, then new chunks: the order they are written in
    items = [BuildItem(point, payload, stored_embed_text(payload)) for point, payload in scan.reencoded]
    items += _new_items(chunks, {document.doc_id: document.source_path for document in embed}, scan.described)
    sparse = SparseSide(encoder, items)
    avgdl, avgdl_by_language = _reindex_lengths(sparse, plan)
    sparse.weigh(avgdl_by_language, avgdl)
    copied = scan.copied
    total = copied + len(items)
    if total == 0 and not (allow_empty and plan.live is not None):
        raise ValueError("nothing to index: the new index would be empty")
    documents = len(set(scan.chunks_by_doc) | {str(item.payload.get("doc_id")) for item in items})
    metadata = _build_metadata(embedder, encoder, avgdl, avgdl_by_language, documents=documents, chunks=total)
    changed = (scan.live_doc_ids | plan.embed_ids) - plan.copy_ids
    version = _next_version(plan.live, plan.live_metadata, copied, changed=changed)
    collection = store.create_build(dim=embedder.dim, metadata=metadata, version=version)
    steps = BuildSteps(total, progress, should_stop)

    def write() -> None:
        steps.advance(0)
        _copy_points(store, plan, collection, batch_size=batch_size, advance=steps.advance)
        write_items(store, collection, embedder, items, sparse, batch_size=batch_size, advance=steps.advance)
        if steps.stopped() or (confirm_switch is not None and not confirm_switch()):
            raise IndexCancelled("the build was cancelled")

    replaced = _write_and_switch(store, collection, write)
    _record_items(items, scan)
    report = ReindexReport(
        collection=collection,
        replaced=replaced,
        documents=documents,
        chunks=total,
        embedded=len(chunks),
        reencoded=len(scan.reencoded),
        copied=copied,
        seconds=time.perf_counter() - started,
        chunks_by_doc=scan.chunks_by_doc,
        document_fields=scan.document_fields,
    )
    logger.info(
        "reindexed into %s: %d documents, %d chunks (%d embedded, %d re-encoded, %d copied) in %.2fs, replaced %s",
        *(report.collection, report.documents, report.chunks, report.embedded, report.reencoded, report.copied),
        *(report.seconds, report.replaced),
    )
    return report


@dataclass(frozen=True, slots=True)
class _ReindexPlan:
    """Which documents a reindex embeds, copies and re-encodes, checked, and the live build it starts from."""

    embed_ids: frozenset[str]
    copy_ids: frozenset[str]
    reencode_ids: frozenset[str]
    live: str | None
    live_metadata: dict[str, Any]

    @classmethod
    def make(
        cls,
        store: VectorStore,
        embedder: Embedder,
        encoder: BM25Encoder,
        *,
        embed: Sequence[Document],
        copy: Collection[str],
        reencode: Collection[str],
    ) -> _ReindexPlan:
        copy_ids, reencode_ids = frozenset(copy), frozenset(reencode)
        embed_ids = frozenset(document.doc_id for document in embed)
        if len(embed_ids) != len(embed):
            raise ValueError("a doc_id appears twice among the documents to embed")
        if copy_ids & reencode_ids or embed_ids & (copy_ids | reencode_ids):
            raise ValueError("each document is either embedded, copied or re-encoded")
        live = store.live_collection()
        live_metadata = store.metadata() if live is not None else {}
        if copy_ids and not build_compatible(live_metadata, embedder, encoder):
            raise ValueError("points can only be copied from a live build made in the same vector space")
        return cls(embed_ids, copy_ids, reencode_ids, live, live_metadata)


@dataclass(slots=True)
class _LiveScan:
    """What one pass over the live payloads found: the points to re-encode, the copied documents' chunks and
    fields (for the bookkeeping), and the descriptions of re-embedded chunks, which are carried over."""

    reencoded: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    chunks_by_doc: dict[str, list[IndexedChunk]] = field(default_factory=dict)
    document_fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    described: dict[str, dict[str, Any]] = field(default_factory=dict)
    live_doc_ids: set[str] = field(default_factory=set)  # for the index version: which documents the build deletes

    @property
    def copied(self) -> int:
        """Points of the copied documents (before the new items are recorded)."""
        return sum(len(found) for found in self.chunks_by_doc.values())


def _scan_live(store: VectorStore, plan: _ReindexPlan, *, new_chunk_ids: set[str]) -> _LiveScan:
    scan = _LiveScan()
    if plan.live is None or not (plan.copy_ids or plan.reencode_ids or new_chunk_ids):
        return scan
    for point in store.scroll(plan.live):
        payload = point.payload
        doc_id = str(payload.get("doc_id", ""))
        scan.live_doc_ids.add(doc_id)
        if doc_id in plan.reencode_ids:
            scan.reencoded.append((point.point_id, payload))
        elif doc_id in plan.copy_ids:
            scan.chunks_by_doc.setdefault(doc_id, []).append(_indexed_chunk(point.point_id, payload))
            scan.document_fields.setdefault(doc_id, _document_fields(payload))
        elif payload.get("chunk_id") in new_chunk_ids and payload.get("described_at"):
            scan.described[str(payload["chunk_id"])] = payload
    return scan


def _new_items(chunks: Sequence[Chunk], sources: Mapping[str, str], described: Mapping[str, Any]) -> list[BuildItem]:
    """The items of newly chunked documents, with the descriptions of their unchanged chunks carried over."""
    items: list[BuildItem] = []
    for chunk in chunks:
        payload = chunk_payload(chunk, source=sources.get(chunk.doc_id, ""))
        previous = described.get(chunk.chunk_id)
        if (
            previous is not None
            and previous.get("text") == chunk.text
            and previous.get("content_hash") == chunk.content_hash
        ):
            for key in ("description_zh", "description_en", "described_at"):
                payload[key] = previous.get(key, "")
        items.append(BuildItem(point_id(chunk.chunk_id), payload, stored_embed_text(payload)))
    return items


def _reindex_lengths(sparse: SparseSide, plan: _ReindexPlan) -> tuple[float, dict[str, float]]:
    """(avgdl, avgdl by language) of the new build. Copied points keep their sparse vectors, so when a build
    copies, new points use the live build's lengths to be comparable (the fresh ones only for new languages)."""
    fresh = sparse.averages()
    if not plan.copy_ids:
        return sparse.average(), fresh
    old_bm25 = plan.live_metadata.get("bm25") or {}
    return float(old_bm25.get("avgdl") or sparse.average()), {**fresh, **(old_bm25.get("avgdl_by_language") or {})}


def _copy_points(
    store: VectorStore, plan: _ReindexPlan, collection: str, *, batch_size: int, advance: Callable[[int], None]
) -> None:
    """Copy the live points of the copied documents, vectors and all, into the new build."""
    if not plan.copy_ids or plan.live is None:
        return
    batch: list[StorePoint] = []
    for point in store.scroll(plan.live, vectors=True):
        if point.payload.get("doc_id") in plan.copy_ids:
            batch.append(point)
        if len(batch) >= batch_size:
            store.upsert(collection, batch)
            advance(len(batch))
            batch = []
    store.upsert(collection, batch)
    advance(len(batch))


def _record_items(items: Sequence[BuildItem], scan: _LiveScan) -> None:
    """Add the written items to the bookkeeping of the scan (chunks and fields by document), chunks in order."""
    for item in items:
        doc_id = str(item.payload.get("doc_id"))
        scan.chunks_by_doc.setdefault(doc_id, []).append(_indexed_chunk(item.point_id, item.payload))
        scan.document_fields.setdefault(doc_id, _document_fields(item.payload))
    for found in scan.chunks_by_doc.values():
        found.sort(key=lambda chunk: chunk.ordinal)


def _next_version(
    live: str | None, live_metadata: Mapping[str, Any], copied_points: int, *, changed: Collection[str]
) -> IndexVersion | None:
    """The new build's index version: the live one's successor when the build copies live points (the same
    vector space and BM25 lengths, so unchanged documents score as before), else None (a new lineage: a full
    rebuild, or nothing reusable). `changed` are the documents re-indexed or deleted."""
    if live is None or copied_points == 0:
        return None
    return IndexVersion.of_build(live_metadata, live).successor(changed)


# --- descriptions -------------------------------------------------------------------------------------------------


def live_payloads(store: VectorStore, point_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Payloads of live points by point id (missing ids are left out)."""
    live = store.live_collection()
    if live is None or not point_ids:
        return {}
    return store.retrieve(live, list(point_ids))


def describe_points(
    store: VectorStore,
    embedder: Embedder,
    descriptions: Mapping[str, tuple[str, str]],
    *,
    described_at: str,
    encoder: BM25Encoder | None = None,
) -> list[str]:
    """Store (zh-hant, en) descriptions on live points and embed the points again with them appended.

    Writes into the live build in place (a description only adds text, so a search may see a point before or
    after, both whole). Returns the point ids that are not in the live build. In local mode the store's
    in-memory copy is refreshed by `refresh_live`, which callers batch.
    """
    encoder = encoder or BM25Encoder()
    live = store.live_collection()
    if live is None:
        return list(descriptions)
    metadata = store.metadata()
    if not build_compatible(metadata, embedder, encoder):
        raise ValueError("the live index was built with another embedder; run a full reindex first")
    bm25 = metadata.get("bm25") or {}
    by_language: Mapping[str, float] = bm25.get("avgdl_by_language") or {}
    fallback = float(bm25.get("avgdl") or 0.0)
    payloads = live_payloads(store, list(descriptions))
    missing = [point for point in descriptions if point not in payloads]
    if not payloads:
        return missing
    texts: list[str] = []
    for point, payload in payloads.items():
        zh, en = descriptions[point]
        payload.update(description_zh=zh, description_en=en, described_at=described_at)
        texts.append(stored_embed_text(payload))
    dense = embed_batch(embedder, texts)
    points = [
        StorePoint(
            point_id=point,
            dense=vector,
            sparse=encoder.document_vector(
                encoder.term_counts(text), float(by_language.get(str(payload.get("language", "")), fallback))
            ),
            payload=payload,
        )
        for (point, payload), vector, text in zip(payloads.items(), dense, texts, strict=True)
    ]
    store.upsert(live, points)
    return missing


def refresh_live(store: VectorStore) -> None:
    """Make this process's searches see in-place writes to the live build now: the in-memory replica is reloaded
    by pointing the alias at the same build again (one alias operation, nothing deleted). Other processes'
    replicas see the build's revision move and reload at their next `sync`."""
    live = store.live_collection()
    if store.use_memory and live is not None:
        store.activate(live)
