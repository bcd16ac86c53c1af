"""What does a semantic cache hit save, end to end? And which similarity threshold should the cache use?

Latency: the real default workflow (`PipelineRuntime`, compiled graph, `StreamWriter`, a consumer reading every
event to the terminal one) over a temporary index of the demo corpus (`rag/corpus/demo`, local Qdrant, offline
nodes), with a fresh SQLite database for the cache's rows. Three set-ups, each sequentially and with 50
requests in flight:

- hit: the cache wired in and warmed with the paraphrase set's stored questions (asked once through the
  pipeline); requests are their paraphrases that the cache serves (each response's `cached` flag is checked);
- miss, cache wired: the same questions through a cache over the same collection with the threshold at 1.0
  that never stores, so every request pays the lookup (embedding, search over the warmed entries, guard) and then
  the whole pipeline (questions whose key equals a stored one, and so still score 1.0, are left out);
- miss, no cache: `deps.cache = None`, the offline pipeline alone.

Latency is from `runtime.start()` to the terminal event; "first delta" is to the first answer event.

End to end over SSE (`--sse`): a real daphne worker (`chatbot.asgi`, port `--port`) on the same private data
folder (SQLite, local Qdrant, offline nodes, the semantic cache on), the index built by `manage.py reindex`; a client
on loopback posts each question to `/api/v1/rag/ask/stream_chat` on a new connection and times it from sending the
request to reading the terminal event's frame. The stored questions are asked once first (and again until the
cache serves them), then `--requests` hits are timed one after another (each response's `cached` flag is checked).
`--compare DIR` starts a second worker from another checkout of the project (e.g. the commit before a change) on
the next port, with a data folder of its own, and alternates the requests between the two, so both see the same
load on a shared machine.

Threshold (`--sweep`): the hand-written paraphrase sets (tests/rag/semcache/paraphrases.py) with the cache's own
key, embedding and guard, every stored question cached together as in production: recall on paraphrases and
wrong answers served, with and without the guard.

    .venv/bin/python scripts/bench_cache_hit.py [--requests 300] [--concurrency 50] [--sweep]
    .venv/bin/python scripts/bench_cache_hit.py --sse [--requests 300] [--port 21150] [--compare DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_DATA = Path(tempfile.mkdtemp(prefix="bench-semcache-"))
# A private data folder and every integration off, before the settings module reads the environment.
os.environ.update(
    DATA_DIR=str(_DATA),
    QDRANT_PATH=str(_DATA / "qdrant"),
    QDRANT_URL="",
    LLM_BASE_URL="",
    EMBEDDING_BASE_URL="",
    LANGFUSE_PUBLIC_KEY="",
    LANGFUSE_SECRET_KEY="",
    DATABASE_URL="",
    REDIS_URL="",
    RAG_RATE_LIMIT_PER_MINUTE="0",
    RAG_RATE_LIMIT_PER_ADDRESS_PER_MINUTE="0",
    RAG_PRELOAD="false",
    LOG_LEVEL="WARNING",
)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbot.settings")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from rag.deps import PipelineDeps  # noqa: E402
from rag.nodes import build_registry  # noqa: E402
from rag.retrieval.embedding import LexicalEmbedder  # noqa: E402
from rag.retrieval.indexer import build_index  # noqa: E402
from rag.retrieval.markdown import load_markdown_dir  # noqa: E402
from rag.retrieval.retriever import StoreRetriever  # noqa: E402
from rag.retrieval.store import VectorStore  # noqa: E402
from rag.runtime import AskRequest, PipelineRuntime  # noqa: E402
from rag.semcache.cache import LiveIndexVersion, SemanticCache, build_semantic_cache, embed_key  # noqa: E402
from rag.semcache.guard import disagreement, features, question_normalize  # noqa: E402
from rag.workflows.default import default_workflow  # noqa: E402
from tests.rag.semcache.paraphrases import CASES, HELD_OUT, UNRELATED, Case, acceptable  # noqa: E402

# --- latency --------------------------------------------------------------------------------------------------


class LookupOnlyCache(SemanticCache):
    """Looks up like the real cache and never stores, so the questions it misses stay misses."""

    async def store(
        self, question: str, *, language: str, answer: str, sources: list[dict[str, Any]], producer: str = ""
    ) -> None:
        return None


async def ask(runtime: PipelineRuntime, question: str) -> tuple[float, float, dict[str, Any]]:
    """(seconds to the terminal event, seconds to the first answer delta, terminal event)."""
    started = time.perf_counter()
    first = 0.0
    run = await runtime.start(AskRequest(question=question))
    async for event in run.events():
        if not first and event["channel"] == "answer":
            first = time.perf_counter() - started
        if event["channel"] in ("meta_summary", "error"):
            return time.perf_counter() - started, first, event
    raise RuntimeError("the stream ended without a terminal event")


async def measure(
    runtime: PipelineRuntime, questions: Sequence[str], *, n: int, concurrency: int, expect_cached: bool | None
) -> tuple[list[tuple[float, float, dict[str, Any]]], float]:
    """Each request's (total, first delta, terminal event), and the wall time of all `n`."""
    gate = asyncio.Semaphore(concurrency)
    results: list[tuple[float, float, dict[str, Any]]] = []

    async def one(i: int) -> None:
        async with gate:
            results.append(await ask(runtime, questions[i % len(questions)]))

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return results, time.perf_counter() - started


def summarise(
    results: list[tuple[float, float, dict[str, Any]]], wall: float, expect_cached: bool | None
) -> dict[str, Any]:
    totals = sorted(r[0] * 1000 for r in results)
    firsts = sorted(r[1] * 1000 for r in results if r[1])
    unexpected = 0
    if expect_cached is not None:
        unexpected = sum(1 for _, _, end in results if bool(end.get("cached")) != expect_cached)
    return {
        "n": len(results),
        "median": statistics.median(totals),
        "p95": float(np.percentile(totals, 95)),
        "first_median": statistics.median(firsts) if firsts else float("nan"),
        "throughput": len(results) / wall,
        "errors": sum(1 for _, _, end in results if end["channel"] != "meta_summary"),
        "unexpected": unexpected,
    }


def open_pipeline(store: VectorStore, embedder: LexicalEmbedder, cache: SemanticCache | None) -> PipelineRuntime:
    deps = PipelineDeps(retriever=StoreRetriever(store, embedder), cache=cache)
    return PipelineRuntime(registry=build_registry(), deps_factory=lambda: deps, default_workflow=default_workflow())


async def latency(
    args: argparse.Namespace, store: VectorStore, embedder: LexicalEmbedder, cache: SemanticCache
) -> list[tuple[str, str, dict[str, Any]]]:
    cases = CASES + HELD_OUT
    with_cache = open_pipeline(store, embedder, cache)
    for case in cases:  # warm: the stored questions answered once, the long way
        await ask(with_cache, case.stored)
    assert await asyncio.to_thread(cache.wait_idle, 30.0)
    stored = cache.stats()["stores"]
    hit_questions = []
    for case in cases:
        for question in case.same:
            _, _, end = await ask(with_cache, question)
            if end.get("cached"):
                hit_questions.append(question)
    print(f"warm-up: {len(cases)} questions asked, {stored} answers cached; {len(hit_questions)} paraphrases hit")

    miss_cache = LookupOnlyCache(
        index=cache.index, embedder=embedder, index_version=LiveIndexVersion(store), threshold=1.0
    )
    with_miss_cache = open_pipeline(store, embedder, miss_cache)
    miss_questions = []
    for question in hit_questions:
        _, _, end = await ask(with_miss_cache, question)
        if not end.get("cached"):
            miss_questions.append(question)
    without_cache = open_pipeline(store, embedder, None)
    setups = (
        ("hit (cache wired)", with_cache, True, hit_questions),
        ("miss, cache wired (lookup + pipeline)", with_miss_cache, False, miss_questions),
        ("miss, no cache (offline pipeline)", without_cache, None, miss_questions),
    )
    print(f"hit path: {len(hit_questions)} questions; miss paths: {len(miss_questions)} questions")
    rows = []
    for mode, concurrency in (("sequential", 1), (f"{args.concurrency} concurrent", args.concurrency)):
        for _, runtime, cached, questions in setups:  # warm-up, not counted
            await measure(runtime, questions, n=min(50, args.requests), concurrency=concurrency, expect_cached=cached)
        # The machine may be shared: rounds interleave the set-ups so a change of load hits all three alike.
        collected: dict[str, tuple[list[Any], float]] = {label: ([], 0.0) for label, *_ in setups}
        per_round = max(1, args.requests // args.rounds)
        for _ in range(args.rounds):
            for label, runtime, cached, questions in setups:
                results, wall = await measure(
                    runtime, questions, n=per_round, concurrency=concurrency, expect_cached=cached
                )
                done, walls = collected[label]
                collected[label] = (done + results, walls + wall)
        for label, _, cached, _ in setups:
            results, wall = collected[label]
            rows.append((label, mode, summarise(results, wall, cached)))
    await asyncio.to_thread(miss_cache.close)
    return rows


# --- end to end over SSE, against a daphne worker ---------------------------------------------------------------


async def sse_ask(port: int, question: str) -> tuple[float, float, dict[str, Any]]:
    """POST one question on a new connection: (seconds to the terminal frame, to the first answer frame, terminal)."""
    body = json.dumps({"question": question}).encode()
    head = (
        f"POST /api/v1/rag/ask/stream_chat HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    first = 0.0
    try:
        writer.write(head + body)
        await writer.drain()
        async with asyncio.timeout(30.0):
            while line := await reader.readline():
                if not line.startswith(b"data: "):
                    continue
                event = json.loads(line[6:])
                if not first and event.get("channel") == "answer":
                    first = time.perf_counter() - started
                if event.get("channel") in ("meta_summary", "error"):
                    return time.perf_counter() - started, first, event
    finally:
        writer.close()
    raise RuntimeError("the stream ended without a terminal event")


def start_worker(port: int, root: Path = ROOT, data: Path = _DATA) -> subprocess.Popen[bytes]:
    """A daphne worker of the checkout at `root` on `data` (migrated and indexed here), once it answers."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DATA_DIR": str(data), "QDRANT_PATH": str(data / "qdrant")}
    for step in (["migrate", "--noinput"], ["reindex"]):
        subprocess.run([sys.executable, str(root / "manage.py"), *step], env=env, check=True, capture_output=True)
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "chatbot.asgi:application"]
    log = open(data / "daphne.log", "wb")  # noqa: SIM115 - closed with the process
    worker = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=1.0):
                return worker
        except OSError:
            time.sleep(0.2)
    worker.terminate()
    raise RuntimeError(f"daphne did not start on port {port}: see {data / 'daphne.log'}")


async def sse_hits(port: int) -> list[str]:
    """The stored questions, asked until the worker's cache serves them (its writer keeps them shortly after)."""
    questions = [case.stored for case in CASES + HELD_OUT]
    hits: list[str] = []
    for _ in range(20):
        hits = [q for q in questions if (await sse_ask(port, q))[2].get("cached")]
        if len(hits) >= len(questions) // 2:
            break
        await asyncio.sleep(0.25)
    print(f"port {port}: {len(questions)} stored questions, {len(hits)} served from the cache")
    return hits


async def sse_latency(args: argparse.Namespace, ports: Sequence[int]) -> list[dict[str, Any]]:
    """Per worker, its summary; the requests alternate between the workers."""
    hits = [await sse_hits(port) for port in ports]
    for i in range(min(50, args.requests)):  # warm-up, not counted
        for port, questions in zip(ports, hits, strict=True):
            await sse_ask(port, questions[i % len(questions)])
    results: list[list[tuple[float, float, dict[str, Any]]]] = [[] for _ in ports]
    started = time.perf_counter()
    for i in range(args.requests):
        for done, port, questions in zip(results, ports, hits, strict=True):
            done.append(await sse_ask(port, questions[i % len(questions)]))
    wall = time.perf_counter() - started
    return [summarise(done, wall / len(ports), True) for done in results]


def sse_main(args: argparse.Namespace) -> None:
    workers = [(str(ROOT), start_worker(args.port))]
    try:
        if args.compare:
            other = Path(args.compare).resolve()
            data = Path(tempfile.mkdtemp(prefix="bench-semcache-compare-"))
            workers.append((str(other), start_worker(args.port + 1, other, data)))
        rows = asyncio.run(sse_latency(args, [args.port + i for i in range(len(workers))]))
    finally:
        for _, worker in workers:
            worker.terminate()
            worker.wait(timeout=30)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("\n| code | requests | median | p95 | median to first delta | requests/s | errors | not cached |")
    print("|---|---|---|---|---|---|---|---|")
    for (root, _), r in zip(workers, rows, strict=True):
        print(
            f"| {root} | {r['n']} | {r['median']:.1f} ms | {r['p95']:.1f} ms | {r['first_median']:.1f} ms "
            f"| {r['throughput']:.0f} | {r['errors']} | {r['unexpected']} |"
        )


# --- threshold sweep ------------------------------------------------------------------------------------------


def sweep(cases: Sequence[Case], thresholds: Sequence[float]) -> list[tuple[float, float, float, int, int, int]]:
    """Per threshold: (t, recall raw, recall guarded, wrong raw, wrong guarded, questions), as the cache decides:
    the best 3 stored questions of the language at or above t, the first the guard accepts is served."""
    embedder = LexicalEmbedder()

    def vector(question: str) -> np.ndarray:
        return np.asarray(embedder.embed_query(embed_key(question_normalize(question))))

    stored = [
        (case.language, case.stored, vector(case.stored), features(question_normalize(case.stored))) for case in cases
    ]
    asked: list[tuple[str, str, Case | None]] = [
        (case.language, question, case) for case in cases for question in (*case.same, *case.different)
    ]
    asked += [(language, question, None) for language, question in UNRELATED]
    scored = []
    for language, question, case in asked:
        q = vector(question)
        ranked = sorted(
            ((float(q @ v), text, feats) for lang, text, v, feats in stored if lang == language), reverse=True
        )[:3]
        scored.append((question, case, features(question_normalize(question)), ranked))
    paraphrases = sum(len(case.same) for case in cases)
    out = []
    for t in thresholds:
        counts = {"raw": [0, 0], "guarded": [0, 0]}  # [paraphrases served rightly, wrong answers]
        for question, case, feats, ranked in scored:
            above = [(text, f) for score, text, f in ranked if score >= t]
            raw = above[0][0] if above else None
            guarded = next((text for text, f in above if disagreement(feats, f) is None), None)
            for key, served in (("raw", raw), ("guarded", guarded)):
                if served is None:
                    continue
                if case is None or not acceptable(question, served, case):
                    counts[key][1] += 1
                elif question in case.same:
                    counts[key][0] += 1
        out.append(
            (
                t,
                counts["raw"][0] / paraphrases,
                counts["guarded"][0] / paraphrases,
                counts["raw"][1],
                counts["guarded"][1],
                len(scored),
            )
        )
    return out


def print_sweep() -> None:
    thresholds = [round(t, 2) for t in np.arange(0.50, 0.91, 0.05)]
    for name, cases in (("tuning set (CASES)", CASES), ("held-out set (HELD_OUT)", HELD_OUT)):
        same, different = sum(len(c.same) for c in cases), sum(len(c.different) for c in cases)
        print(f"\n{name}: {same} paraphrases, {different} near misses, {len(UNRELATED)} unrelated questions")
        print(
            "| threshold | paraphrases served (no guard) | served (guard) | wrong answers (no guard) | wrong (guard) |"
        )
        print("|---|---|---|---|---|")
        for t, recall_raw, recall, wrong_raw, wrong, total in sweep(cases, thresholds):
            print(f"| {t:.2f} | {recall_raw:.0%} | {recall:.0%} | {wrong_raw} / {total} | {wrong} / {total} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds the requests are split into")
    parser.add_argument("--sweep", action="store_true", help="also print the threshold sweep")
    parser.add_argument("--sse", action="store_true", help="cache hits end to end over SSE against a daphne worker")
    parser.add_argument("--port", type=int, default=21150, help="the daphne worker's port with --sse")
    parser.add_argument("--compare", default="", help="with --sse: another checkout whose worker is timed alongside")
    args = parser.parse_args()
    print(f"machine: {platform.platform()}; {platform.machine()}; cpus={os.cpu_count()}")
    print(f"python: {platform.python_implementation()} {platform.python_version()}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    command = f"--requests {args.requests} --concurrency {args.concurrency} --rounds {args.rounds}"
    command += " --sweep" if args.sweep else ""
    if args.sse:
        compare = f" --compare {args.compare}" if args.compare else ""
        print(f"command: .venv/bin/python scripts/bench_cache_hit.py --sse --requests {args.requests}{compare}")
        sse_main(args)
        return
    print(f"command: .venv/bin/python scripts/bench_cache_hit.py {command}")
    # the blocking set-up, before the event loop: database, index of the demo corpus, the cache beside it
    call_command("migrate", verbosity=0)
    embedder = LexicalEmbedder()
    store = VectorStore.open(settings.QDRANT_COLLECTION, path=_DATA / "qdrant")
    build_index(load_markdown_dir(settings.CORPUS_DIR), store, embedder)
    cache = build_semantic_cache(store, embedder)
    try:
        rows = asyncio.run(latency(args, store, embedder, cache))
    finally:
        cache.close()
        store.close()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("\n| path | mode | requests | median | p95 | median to first delta | requests/s | errors | not as expected |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, mode, r in rows:
        print(
            f"| {label} | {mode} | {r['n']} | {r['median']:.1f} ms | {r['p95']:.1f} ms | {r['first_median']:.1f} ms "
            f"| {r['throughput']:.0f} | {r['errors']} | {r['unexpected']} |"
        )
    if args.sweep:
        print_sweep()


if __name__ == "__main__":
    main()
