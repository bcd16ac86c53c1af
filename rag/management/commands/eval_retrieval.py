"""`manage.py eval_retrieval FILE [--k 1,5,10] [--json] [--mode MODE] [--limit-questions N]`: retrieval quality.

Loads a SQuAD-format file (every paragraph a document, as `load_documents` does), indexes it into a store of its
own (a temporary local Qdrant folder, never the live index, so it runs while the server holds the live store),
asks every question through `StoreRetriever.search`, the call the pipeline's tool_executor makes, and reports:

- recall@k: the share of questions whose gold paragraph is among the first k distinct documents (chunks of one
  document count once, as a reader sees one source);
- MRR over the first max(k) documents (0 when the gold paragraph is not among them);
- query latency p50/p95 in ms (embedding, search and the worker-thread hop, one question at a time);
- index_seconds: chunking, embedding, BM25 and writing the build, as `build_index` reports it.

`--json` prints one JSON object (keys recall@<k>..., mrr, query_ms_p50, query_ms_p95, index_seconds, questions,
plus details), and nothing else on stdout; skipped paragraphs are listed on stderr.

The embedder is the configured one (rag.wiring.build_embedder: EMBEDDING_BASE_URL, SENTENCE_TRANSFORMERS_MODEL or
the offline lexical embedding; `--embedder lexical` forces the latter), so a real model is measured the way the
server would use it; without `--mode` the search mode and knobs are the server's (RAG_SEARCH_MODE, else the
embedder kind's default). A network embedder's calls go through the call policy and the concurrency manager.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from rag.errors import PipelineAbort
from rag.llm.client import aclose_clients
from rag.retrieval.chunking import ChunkingConfig
from rag.retrieval.embedding import Embedder, LexicalEmbedder, aembed_query, bind_embedder_loop
from rag.retrieval.indexer import build_index
from rag.retrieval.loaders import SquadFile, SquadQuestion, chunking_for, read_squad
from rag.retrieval.loaders.base import SkipFile
from rag.retrieval.markdown import LANGUAGES, LoadError
from rag.retrieval.retriever import StoreRetriever, default_mode
from rag.retrieval.store import SEARCH_MODES, SearchMode, SearchSettings, VectorStore
from rag.text.language import EN, ZH_HANS, ZH_HANT, detect_language
from rag.wiring import build_embedder, configure_concurrency_manager, search_settings_from_settings

CHUNKINGS = ("passage", "article")


@dataclass(frozen=True, slots=True)
class EvalResult:
    ks: tuple[int, ...]
    recall: dict[int, float]
    mrr: float
    query_ms: list[float]
    index_seconds: float
    load_seconds: float
    documents: int
    chunks: int
    questions: int
    skipped: int
    mode: str = ""
    # questions whose gold paragraph came first, of all and of the even and odd questions in file order (a gain
    # that shows on both halves is not one sample's luck)
    hits_at_1: int = 0
    halves_at_1: tuple[float, float] = (0.0, 0.0)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f"recall@{k}": round(self.recall[k], 4) for k in self.ks}
        out.update(
            {
                "hits@1": self.hits_at_1,
                "recall@1_even": round(self.halves_at_1[0], 4),
                "recall@1_odd": round(self.halves_at_1[1], 4),
            }
        )
        out.update(
            mrr=round(self.mrr, 4),
            query_ms_p50=round(statistics.median(self.query_ms), 3),
            query_ms_p95=round(percentile(self.query_ms, 0.95), 3),
            index_seconds=round(self.index_seconds, 3),
            questions=self.questions,
            documents=self.documents,
            chunks=self.chunks,
            skipped=self.skipped,
            load_seconds=round(self.load_seconds, 3),
        )
        return out


# `progress(stage, done, total)`: "indexing" per batch of chunks, then "asking" per question.
StageProgress = Callable[[str, int, int], None]
_BAR_WIDTH = 28
_DRAW_INTERVAL = 0.25


class ProgressBar:
    """The run's progress on stderr, redrawn in place (\r) at most four times a second, as reindex draws its
    own; stdout keeps the results alone (`--json` stays one object)."""

    def __init__(self, out: OutputWrapper) -> None:
        self.out = out
        self.drawn_at = 0.0
        self.stage = ""

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        finished = done >= total
        if stage == self.stage and not finished and now - self.drawn_at < _DRAW_INTERVAL:
            return
        if self.stage and stage != self.stage:
            self.out.write("\n", ending="")
        self.stage, self.drawn_at = stage, now
        filled = round(_BAR_WIDTH * done / total) if total else 0
        percent = round(100 * done / total) if total else 0
        bar = "#" * filled + "." * (_BAR_WIDTH - filled)
        self.out.write(f"\r{stage:<8} [{bar}] {done}/{total} {percent:3d}%", ending="")
        self.out.flush()

    def close(self) -> None:
        if self.stage:
            self.out.write("\n", ending="")
            self.out.flush()


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: with thousands of samples the difference is noise)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]


def parse_ks(raw: str) -> tuple[int, ...]:
    try:
        ks = sorted({int(part) for part in raw.split(",") if part.strip()})
    except ValueError as exc:
        raise CommandError(f"--k takes comma-separated whole numbers, got {raw!r}") from exc
    if not ks or ks[0] < 1:
        raise CommandError("--k needs at least one k >= 1")
    return tuple(ks)


def _search_language(question: str) -> str | None:
    # what tool_executor passes on its first pass: the question's language mapped to the corpus's script
    language = detect_language(question)
    if language in (ZH_HANT, ZH_HANS):
        return ZH_HANT
    return EN if language == EN else None


def gold_rank(doc_ids: list[str], gold: str, depth: int) -> int:
    """1-based rank of `gold` among the first `depth` distinct documents, 0 when it is not there."""
    distinct: list[str] = []
    for doc_id in doc_ids:
        if doc_id not in distinct:
            distinct.append(doc_id)
            if doc_id == gold:
                return len(distinct)
            if len(distinct) == depth:
                break
    return 0


@dataclass(frozen=True, slots=True)
class Variant:
    """One way of searching the same index: a mode and its knobs."""

    mode: SearchMode
    settings: SearchSettings

    @property
    def label(self) -> str:
        if self.mode == "hybrid_weighted":
            return f"hybrid_weighted w={self.settings.dense_weight:g}"
        return self.mode


def variants_of(modes: Sequence[SearchMode], settings: SearchSettings, weights: Sequence[float]) -> list[Variant]:
    """Every mode asked for, `hybrid_weighted` once per dense weight (the settings' own when none are given)."""
    out: list[Variant] = []
    for mode in modes:
        if mode == "hybrid_weighted" and weights:
            out.extend(Variant(mode, replace(settings, dense_weight=weight)) for weight in weights)
        else:
            out.append(Variant(mode, settings))
    return out


async def index_and_ask(
    documents: list[Any],
    store: VectorStore,
    retrievers: list[StoreRetriever],
    questions: list[SquadQuestion],
    depth: int,
    chunking: ChunkingConfig,
    on_loop: Callable[[], None] | None = None,
    progress: StageProgress | None = None,
) -> tuple[Any, list[list[int]], list[list[float]]]:
    """Build the index (on a thread) and ask, all on this one loop: a network embedder's calls, at index and at
    query time, run here under one concurrency manager and one set of HTTP clients. The retrievers share the
    store and the embedder: one index, each question embedded once, searched in every retriever's mode."""
    if on_loop is not None:
        on_loop()
    embedder = retrievers[0].embedder
    bind_embedder_loop(embedder, asyncio.get_running_loop())
    try:
        indexing = (lambda done, total: progress("indexing", done, total)) if progress else None
        report = await asyncio.to_thread(build_index, documents, store, embedder, config=chunking, progress=indexing)
        ranks, latencies = await ask_all(retrievers, questions, depth, progress)
        return report, ranks, latencies
    finally:
        bind_embedder_loop(embedder, None)
        await aclose_clients()


async def ask_all(
    retrievers: list[StoreRetriever],
    questions: list[SquadQuestion],
    depth: int,
    progress: StageProgress | None = None,
) -> tuple[list[list[int]], list[list[float]]]:
    """Per retriever, the ranks of the gold paragraphs and the per-question latencies (ms: the query's embedding,
    when its mode uses one, plus the search and its thread hop), questions asked one at a time."""
    # more chunks than documents wanted: several chunks of one document take one place
    limit = depth * 3
    embedder = retrievers[0].embedder
    dense_needed = any(r.mode != "sparse" for r in retrievers)
    for retriever in retrievers:  # thread pool start and first-use caches are not query latency
        await retriever.search("warm-up", limit=1)
    ranks: list[list[int]] = [[] for _ in retrievers]
    latencies: list[list[float]] = [[] for _ in retrievers]
    for done, question in enumerate(questions, 1):
        language = _search_language(question.text)
        started = time.perf_counter()
        dense = await aembed_query(embedder, question.text) if dense_needed else None
        embed_ms = (time.perf_counter() - started) * 1000
        for i, retriever in enumerate(retrievers):
            uses_dense = retriever.mode != "sparse"
            started = time.perf_counter()
            vector = dense if uses_dense else None
            chunks = await asyncio.to_thread(
                retriever.search_sync, question.text, limit=limit, language=language, dense=vector
            )
            latencies[i].append((time.perf_counter() - started) * 1000 + (embed_ms if uses_dense else 0.0))
            ranks[i].append(gold_rank([chunk.doc_id for chunk in chunks], question.doc_id, depth))
        if progress is not None:
            progress("asking", done, len(questions))
    return ranks, latencies


def first_documents(squad: SquadFile, count: int) -> SquadFile:
    """The file's first `count` paragraphs and the questions on them (a quicker run with a slow embedder)."""
    if count <= 0:
        return squad
    documents = squad.documents[:count]
    kept = {document.doc_id for document in documents}
    return SquadFile(documents, [q for q in squad.questions if q.doc_id in kept])


def evaluate_squad(
    path: Path,
    *,
    ks: tuple[int, ...],
    mode: SearchMode | None = None,
    limit_questions: int = 0,
    language: str | None = None,
    chunking: ChunkingConfig | None = None,
    errors: list[LoadError] | None = None,
    embedder: Embedder | None = None,
    search_settings: SearchSettings | None = None,
    on_loop: Callable[[], None] | None = None,
    progress: StageProgress | None = None,
    variants: Sequence[Variant] = (),
    limit_documents: int = 0,
) -> list[EvalResult]:
    """Index `path` into a temporary store and ask its questions, once per variant (default: `mode`, else the
    embedder's default mode). Raises `SkipFile` for an unusable file."""
    sink: list[LoadError] = errors if errors is not None else []
    started = time.perf_counter()
    squad = first_documents(read_squad(path, doc_prefix=path.stem, language=language, errors=sink), limit_documents)
    load_seconds = time.perf_counter() - started
    questions = squad.questions[:limit_questions] if limit_questions > 0 else squad.questions
    if not questions:
        raise SkipFile("no answerable questions in the file")
    depth = max(ks)
    # default: the product's offline embedder with its default dimensions
    embedder = embedder or LexicalEmbedder()
    settings = search_settings or SearchSettings()
    variants = list(variants) or [Variant(mode or default_mode(embedder), settings)]
    with (
        tempfile.TemporaryDirectory(prefix="eval-retrieval-") as folder,
        VectorStore.open("eval", path=folder) as store,
    ):
        retrievers = [StoreRetriever(store, embedder, mode=v.mode, settings=v.settings) for v in variants]
        report, ranks, latencies = asyncio.run(
            index_and_ask(
                squad.documents,
                store,
                retrievers,
                questions,
                depth,
                chunking or chunking_for("squad"),
                on_loop,
                progress,
            )
        )
    return [
        EvalResult(
            ks=ks,
            recall={k: sum(1 for r in variant_ranks if 0 < r <= k) / len(variant_ranks) for k in ks},
            mrr=sum(1 / r for r in variant_ranks if r) / len(variant_ranks),
            query_ms=variant_latencies,
            index_seconds=report.seconds,
            load_seconds=load_seconds,
            documents=report.documents,
            chunks=report.chunks,
            questions=len(variant_ranks),
            skipped=len(sink),
            mode=variant.label,
            hits_at_1=sum(1 for r in variant_ranks if r == 1),
            halves_at_1=(first_share(variant_ranks[0::2]), first_share(variant_ranks[1::2])),
        )
        for variant, variant_ranks, variant_latencies in zip(variants, ranks, latencies, strict=True)
    ]


def first_share(ranks: Sequence[int]) -> float:
    """The share of `ranks` that are 1 (0.0 for none)."""
    return sum(1 for r in ranks if r == 1) / len(ranks) if ranks else 0.0


def parse_modes(raw: str | None) -> list[SearchMode]:
    if not raw:
        return []
    modes = [part.strip() for part in raw.split(",") if part.strip()]
    unknown = [mode for mode in modes if mode not in SEARCH_MODES]
    if unknown or not modes:
        raise CommandError(f"--mode takes modes of {', '.join(SEARCH_MODES)}, comma-separated; got {raw!r}")
    return [cast(SearchMode, mode) for mode in dict.fromkeys(modes)]


def parse_weights(raw: str | None) -> list[float]:
    if not raw:
        return []
    try:
        weights = [float(part) for part in raw.split(",") if part.strip()]
    except ValueError as exc:
        raise CommandError(f"--dense-weights takes numbers from 0 to 1, comma-separated; got {raw!r}") from exc
    if not weights or not all(0.0 <= w <= 1.0 for w in weights):
        raise CommandError(f"--dense-weights takes numbers from 0 to 1, comma-separated; got {raw!r}")
    return weights


class Command(BaseCommand):
    help = "Measure retrieval on a SQuAD-format file (recall@k, MRR, latency) in a temporary store of its own."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="SQuAD-format JSON: data[].paragraphs[].context and qas")
        parser.add_argument("--k", default="1,5,10", help="cut-offs for recall@k, comma-separated (default 1,5,10)")
        parser.add_argument(
            "--json", action="store_true", help="print one JSON object (one per line with several modes)"
        )
        parser.add_argument(
            "--mode",
            default=None,
            help=f"search mode, or several comma-separated, asked on one index ({', '.join(SEARCH_MODES)}; default: "
            "RAG_SEARCH_MODE, else the embedder kind's: sparse for the lexical one)",
        )
        parser.add_argument(
            "--dense-weights",
            default=None,
            help="hybrid_weighted: one run per dense weight, comma-separated (default: RAG_SEARCH_DENSE_WEIGHT)",
        )
        parser.add_argument(
            "--embedder",
            choices=("configured", "lexical"),
            default="configured",
            help="configured: the server's (EMBEDDING_BASE_URL, SENTENCE_TRANSFORMERS_MODEL...); lexical: offline",
        )
        parser.add_argument("--limit-questions", type=int, default=0, help="ask only the first N questions (0: all)")
        parser.add_argument(
            "--limit-documents",
            type=int,
            default=0,
            help="index only the first N paragraphs, and ask only their questions (0: all)",
        )
        parser.add_argument(
            "--language", choices=sorted(LANGUAGES), help="language of the paragraphs (default: detected per paragraph)"
        )
        parser.add_argument(
            "--chunking",
            choices=CHUNKINGS,
            default="passage",
            help="passage: paragraphs whole up to 1,000 units (the SQuAD loader's); article: help-article sizes",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        ks = parse_ks(options["k"])
        modes = parse_modes(options["mode"])
        weights = parse_weights(options["dense_weights"])
        chunking = chunking_for("squad") if options["chunking"] == "passage" else ChunkingConfig()
        errors: list[LoadError] = []
        try:
            embedder = build_embedder() if options["embedder"] == "configured" else LexicalEmbedder()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        default, search_settings = search_settings_from_settings(embedder)
        variants = variants_of(modes or [default], search_settings, weights)
        bar = ProgressBar(self.stderr)
        try:
            results = evaluate_squad(
                path,
                ks=ks,
                limit_questions=max(0, options["limit_questions"]),
                limit_documents=max(0, options["limit_documents"]),
                language=options["language"],
                chunking=chunking,
                errors=errors,
                embedder=embedder,
                search_settings=search_settings,
                variants=variants,
                on_loop=configure_concurrency_manager,
                progress=bar,
            )
        except SkipFile as exc:
            raise CommandError(f"{path}: {exc.reason}") from exc
        except PipelineAbort as exc:
            raise CommandError(exc.message) from exc
        finally:
            bar.close()
        for error in errors:
            self.stderr.write(f"skipped {error}")
        for result in results:
            self._report(result, path=path, chunking=options["chunking"], embedder=embedder, as_json=options["json"])

    def _report(self, result: EvalResult, *, path: Path, chunking: str, embedder: Embedder, as_json: bool) -> None:
        summary = result.as_dict() | {
            "mode": result.mode,
            "chunking": chunking,
            "file": path.name,
            "embedder": embedder.name,
        }
        if as_json:
            self.stdout.write(json.dumps(summary, ensure_ascii=False))
            return
        self.stdout.write(
            f"{path.name}: {result.documents} paragraphs -> {result.chunks} chunks, {result.questions} questions; "
            f"mode {result.mode}, chunking {chunking}, embedder {embedder.name}"
        )
        for k in result.ks:
            self.stdout.write(f"  recall@{k:<3} {result.recall[k]:.4f}")
        even, odd = result.halves_at_1
        self.stdout.write(f"  hits@1      {result.hits_at_1} (recall@1 even questions {even:.4f}, odd {odd:.4f})")
        self.stdout.write(f"  MRR@{max(result.ks):<5} {result.mrr:.4f}")
        self.stdout.write(f"  query ms    p50 {summary['query_ms_p50']:.2f}  p95 {summary['query_ms_p95']:.2f}")
        self.stdout.write(f"  index       {result.index_seconds:.2f} s (load {result.load_seconds:.2f} s)")
