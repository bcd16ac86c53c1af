#!/usr/bin/env python
"""How far does the embedded vector store scale? Index time, query latency and memory by corpus size.

Two stores side by side: ``database`` (the default without QDRANT_URL: the index kept in the Django database and
every worker answering from a replica in memory; SQLite here, or PostgreSQL with --database-url) and
``qdrant-local`` (qdrant-client's local mode, the default before). For the database, "reopen" and "replica MB" are
what a worker pays to start: a fresh process that loads the live build into memory and answers its first question.

A synthetic corpus is generated deterministically from the demo corpus: its sentences (Traditional Chinese and
English) recombined into documents of one chunk each (about 120-250 units, under the chunker's target), each with a
few made-up names and form codes so the vocabulary has a long tail like a real one (a corpus of recombined
sentences alone would give every token a huge posting list, the sparse engine's worst case). Each size runs in a
fresh process, so its memory figures are its own: it builds the index through the product's path (`build_index`
into a temporary local Qdrant folder, the `MemoryIndex` the store answers from in local mode), then asks a few
hundred short questions (fragments of corpus sentences: 6-16 CJK characters or 3-7 English words) one at a time
through `StoreRetriever.search_sync` in each mode and reports p50/p95 in ms.

    .venv/bin/python scripts/bench_retrieval_scale.py --chunks 20000
    .venv/bin/python scripts/bench_retrieval_scale.py --chunks 5000,10000,20000 --queries 300 --json
    .venv/bin/python scripts/bench_retrieval_scale.py --store database --database-url postgres://postgres@127.0.0.1/bench

There is no Qdrant server here, so nothing is measured for it: see docs/benchmarks/retrieval.md for what it
changes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rag.retrieval.chunking import split_sentences, text_units  # noqa: E402
from rag.retrieval.embedding import LexicalEmbedder  # noqa: E402
from rag.retrieval.indexer import build_index  # noqa: E402
from rag.retrieval.markdown import Document, load_markdown_dir  # noqa: E402
from rag.retrieval.retriever import StoreRetriever  # noqa: E402
from rag.retrieval.store import SEARCH_MODES, VectorStore  # noqa: E402
from rag.text.tokenize import cjk_ratio  # noqa: E402

DEMO = ROOT / "rag" / "corpus" / "demo"
BUDGET_MS = 15.0
_CJK_RANGE = ("\u4e00", "\u9fff")


def _rss_mb() -> float:
    """Resident memory now (Linux /proc), else the peak from getrusage."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def vocabulary() -> tuple[list[str], list[str], list[str]]:
    """(Chinese sentences, English sentences, CJK characters) of the demo corpus, in a fixed order."""
    zh: list[str] = []
    en: list[str] = []
    for document in load_markdown_dir(DEMO):
        for line in document.text.splitlines():
            if line.lstrip().startswith("#"):
                continue
            for sentence in split_sentences(line.lstrip("-0123456789. ")):
                if text_units(sentence) < 4:
                    continue
                (zh if cjk_ratio(sentence) > 0.5 else en).append(sentence)
    characters = sorted({ch for sentence in zh for ch in sentence if _CJK_RANGE[0] <= ch <= _CJK_RANGE[1]})
    return zh, en, characters


def synthetic_corpus(count: int, *, seed: int) -> tuple[list[Document], list[str]]:
    """`count` one-chunk documents (60 % Chinese, 40 % English) and the sentences they were made of."""
    rng = random.Random(seed)
    zh, en, characters = vocabulary()
    documents: list[Document] = []
    for index in range(count):
        chinese = index % 5 < 3
        pool = zh if chinese else en
        # made-up names and codes: rare tokens, as course names, agencies and form numbers are in a real corpus
        if chinese:
            name = "".join(rng.choice(characters) for _ in range(rng.randint(2, 4)))
        else:
            name = "".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3)).capitalize()
        code = f"{rng.choice('ABCDEFGH')}-{rng.randint(100, 9999)}"
        sentences = [f"{name}（{code}）" if chinese else f"{name} ({code})."]
        target = rng.randint(120, 250)
        while text_units(" ".join(sentences)) < target:
            sentences.append(rng.choice(pool))
        text = ("" if chinese else " ").join(sentences)
        documents.append(
            Document(
                doc_id=f"synthetic/{index:06d}",
                title=f"{name} {code}",
                text=text,
                language="zh-hant" if chinese else "en",
                content_hash=f"{index:064x}",
            )
        )
    return documents, zh + en


def questions(sentences: list[str], count: int, *, seed: int) -> list[str]:
    """Short fragments of corpus sentences, the length of real questions."""
    rng = random.Random(seed + 1)
    out: list[str] = []
    while len(out) < count:
        sentence = rng.choice(sentences)
        if cjk_ratio(sentence) > 0.5:
            size = rng.randint(6, 16)
            start = rng.randint(0, max(0, len(sentence) - size))
            out.append(sentence[start : start + size])
        else:
            words = sentence.split()
            size = rng.randint(3, 7)
            start = rng.randint(0, max(0, len(words) - size))
            out.append(" ".join(words[start : start + size]))
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]


def _latencies(retriever: StoreRetriever, asked: list[str]) -> dict[str, float]:
    for warm in asked[:5]:
        retriever.search_sync(warm, limit=10)
    times: list[float] = []
    for question in asked:
        started = time.perf_counter()
        retriever.search_sync(question, limit=10, language="zh-hant" if cjk_ratio(question) > 0.5 else "en")
        times.append((time.perf_counter() - started) * 1000)
    return {"p50": round(statistics.median(times), 3), "p95": round(percentile(times, 0.95), 3)}


def _django(database_url: str, data_dir: str) -> None:
    """Configure Django for the database store (this process only), migrated."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "chatbot.settings"
    os.environ["DATA_DIR"] = data_dir
    os.environ["DATABASE_URL"] = database_url
    os.environ["QDRANT_URL"] = ""
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def measure_reopen(alias: str, question: str) -> dict[str, Any]:
    """A fresh worker's start: open the database store, load its replica, answer one question (this process)."""
    rss_before = _rss_mb()
    started = time.perf_counter()
    store = VectorStore.open_database(alias)
    store.sync()
    StoreRetriever(store, LexicalEmbedder()).search_sync(question, limit=10)
    seconds = time.perf_counter() - started
    return {"reopen_seconds": round(seconds, 2), "replica_mb": round(_rss_mb() - rss_before, 1)}


def measure_one(chunks: int, *, queries: int, modes: list[str], seed: int, store_kind: str) -> dict[str, Any]:
    """One corpus size, in this process (call it in a fresh one: memory figures include everything loaded)."""
    rss_start = _rss_mb()
    documents, sentences = synthetic_corpus(chunks, seed=seed)
    asked = questions(sentences, queries, seed=seed)
    embedder = LexicalEmbedder()  # the product's default (1,024 dimensions)
    rss_before = _rss_mb()
    latency: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as folder:
        if store_kind == "database":
            alias = f"bench-{chunks}-{os.getpid()}"
            store = VectorStore.open_database(alias)
        else:
            store = VectorStore.open("bench", path=folder)
        with store:
            cpu_before = time.process_time()
            report = build_index(documents, store, embedder)
            # this process's CPU time: what the build costs, less the wait for a CPU on a shared machine
            index_cpu = time.process_time() - cpu_before
            rss_after = _rss_mb()
            disk_mb = sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) / 2**20
            for mode in modes:
                latency[mode] = _latencies(StoreRetriever(store, embedder, mode=mode), asked)  # type: ignore[arg-type]
        if store_kind == "database":
            # a worker starting on the index another process built: a fresh interpreter, its own memory
            command = [sys.executable, __file__, "--reopen", alias, "--question", asked[0]]
            child = subprocess.run(command, env=os.environ, capture_output=True, text=True, check=True)
            reopened = json.loads(child.stdout.strip().splitlines()[-1])
            with VectorStore.open_database(alias) as cleanup:
                from django.db import connection

                disk_mb = _table_mb(connection)
                _drop_all(cleanup)
        else:
            # what a server restart pays before its first answer: qdrant-client reads every point back from its
            # SQLite file, then the store copies them into the in-memory index
            started = time.perf_counter()
            with VectorStore.open("bench", path=folder) as store:
                StoreRetriever(store, embedder).search_sync(asked[0], limit=10)
            reopened = {"reopen_seconds": round(time.perf_counter() - started, 2), "replica_mb": None}
    return {
        # other work on the machine shows in every latency: say how busy it was (1-minute load average)
        "load_average": round(os.getloadavg()[0], 2),
        "store": store_kind,
        "chunks": report.chunks,
        "documents": report.documents,
        "index_seconds": round(report.seconds, 2),
        "index_cpu_seconds": round(index_cpu, 2),
        **reopened,
        "rss_start_mb": round(rss_start, 1),
        "rss_before_index_mb": round(rss_before, 1),
        "rss_after_index_mb": round(rss_after, 1),
        "index_rss_mb": round(rss_after - rss_before, 1),
        "peak_rss_mb": round(_peak_mb(), 1),
        "dense_matrix_mb": round(report.chunks * embedder.dim * 4 / 2**20, 1),
        "disk_mb": round(disk_mb, 1),
        "queries": len(asked),
        "latency_ms": latency,
    }


def _table_mb(connection: Any) -> float:
    """Size of the index tables: PostgreSQL's own figure, or SQLite's file."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT sum(pg_total_relation_size(c)) FROM unnest(ARRAY['rag_indexpoint', 'rag_indexbuild']) AS c"
            )
            return float(cursor.fetchone()[0] or 0) / 2**20
    return Path(connection.settings_dict["NAME"]).stat().st_size / 2**20


def _drop_all(store: VectorStore) -> None:
    backend = store.backend
    backend.update_aliases([("delete", a, "") for a in (store.alias, store.previous_alias) if a in backend.aliases()])
    for name in store.builds():
        backend.delete_collection(name)


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope)."""
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread if spread else 0.0
    return mean_y - slope * mean_x, slope


def render(results: list[dict[str, Any]], modes: list[str], *, threads: str) -> str:
    lines = [
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"OpenBLAS threads: {threads}",
        "",
        "| store | chunks | load avg | index s | index CPU s | reopen s | replica MB | index RSS MB | peak RSS MB "
        "| dense matrix MB | disk MB | " + " | ".join(f"{m} p50 / p95 ms" for m in modes) + " |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
        + " | ".join("---:" for _ in modes)
        + " |",
    ]
    for r in results:
        cells = " | ".join(f"{r['latency_ms'][m]['p50']:.2f} / {r['latency_ms'][m]['p95']:.2f}" for m in modes)
        replica = "-" if r.get("replica_mb") is None else f"{r['replica_mb']:.0f}"
        lines.append(
            f"| {r['store']} | {r['chunks']:,} | {r['load_average']:.1f} | {r['index_seconds']:.1f} | "
            f"{r['index_cpu_seconds']:.1f} | "
            f"{r['reopen_seconds']:.2f} | {replica} | {r['index_rss_mb']:.0f} | "
            f"{r['peak_rss_mb']:.0f} | {r['dense_matrix_mb']:.0f} | {r['disk_mb']:.0f} | {cells} |"
        )
    if len(results) >= 2 and len({r["store"] for r in results}) == 1:
        xs = [float(r["chunks"]) for r in results]
        lines.append("")
        lines.append("Linear fits over the sizes measured (extrapolations, not measurements):")
        for label, ys in (
            ("index seconds", [r["index_seconds"] for r in results]),
            ("reopen seconds", [r["reopen_seconds"] for r in results]),
            ("index RSS MB", [r["index_rss_mb"] for r in results]),
            *(
                (("replica MB", [r["replica_mb"] for r in results]),)
                if results[0].get("replica_mb") is not None
                else ()
            ),
        ):
            intercept, slope = fit_line(xs, ys)
            lines.append(
                f"- {label}: {intercept:.1f} + {slope * 1000:.2f} per 1,000 chunks -> "
                f"100k: {intercept + slope * 100_000:,.0f}, 1M: {intercept + slope * 1_000_000:,.0f}"
            )
        for mode in modes:
            ys = [r["latency_ms"][mode]["p50"] for r in results]
            intercept, slope = fit_line(xs, ys)
            reach = f"{(BUDGET_MS - intercept) / slope:,.0f} chunks" if slope > 0 else "not reached (no growth)"
            lines.append(
                f"- {mode} p50 ms: {intercept:.2f} + {slope * 1000:.3f} per 1,000 chunks -> "
                f"100k: {intercept + slope * 100_000:.1f} ms; {BUDGET_MS:g} ms budget at {reach}"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", default="5000,10000,20000", help="corpus sizes, comma-separated")
    parser.add_argument("--queries", type=int, default=300, help="questions asked per mode and size")
    parser.add_argument("--modes", default="sparse,dense,hybrid_rrf", help=f"of {', '.join(SEARCH_MODES)}")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=0,
        help="OPENBLAS_NUM_THREADS (and OMP_NUM_THREADS) for the measuring processes (0: inherit)",
    )
    parser.add_argument("--store", choices=("database", "qdrant-local"), default="database")
    parser.add_argument(
        "--database-url", default="", help="the database store's DATABASE_URL (default: a SQLite file in a temp dir)"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--one", type=int, default=0, help=argparse.SUPPRESS)  # a child process: one size
    parser.add_argument("--reopen", default="", help=argparse.SUPPRESS)  # a child process: a worker's start
    parser.add_argument("--question", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reopen:
        _django(os.environ.get("DATABASE_URL", ""), os.environ["DATA_DIR"])
        print(json.dumps(measure_reopen(args.reopen, args.question)))
        return 0
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(modes) - set(SEARCH_MODES))
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}")
    if args.one:
        if args.store == "database":
            _django(os.environ.get("DATABASE_URL", ""), os.environ["DATA_DIR"])
        result = measure_one(args.one, queries=args.queries, modes=modes, seed=args.seed, store_kind=args.store)
        print(json.dumps(result))
        return 0
    sizes = sorted({int(part) for part in args.chunks.split(",") if part.strip()})
    environment = dict(os.environ)
    if args.blas_threads:
        # read by OpenBLAS when numpy loads it, so it has to be set before the child starts
        environment["OPENBLAS_NUM_THREADS"] = environment["OMP_NUM_THREADS"] = str(args.blas_threads)
    results = []
    data_dir = tempfile.mkdtemp(prefix="bench-scale-db-")
    environment["DATA_DIR"], environment["DATABASE_URL"] = data_dir, args.database_url
    try:
        for size in sizes:
            # a fresh interpreter per size: its memory is that size's alone, not the leftovers of the one before
            command = [sys.executable, __file__, "--one", str(size), "--queries", str(args.queries)]
            command += ["--modes", ",".join(modes), "--seed", str(args.seed), "--store", args.store]
            child = subprocess.run(command, env=environment, capture_output=True, text=True)
            if child.returncode != 0:
                print(child.stderr[-3000:], file=sys.stderr)
                return child.returncode
            results.append(json.loads(child.stdout.strip().splitlines()[-1]))
            print(f"measured {size:,} chunks ({args.store})", file=sys.stderr)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    print(
        json.dumps(results, indent=2)
        if args.json
        else render(results, modes, threads=environment.get("OPENBLAS_NUM_THREADS", "default"))
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
