"""How much CPU does the graph engine itself cost per request?

Runs the default workflow's shape with trivial nodes (same names, routes, inputs and outputs; each `run`
returns a fixed route, retrieval_checker "relevant") through `CompiledGraph.run` with a real StreamWriter and a
consumer draining the channel, and reports the median CPU time per request (`time.process_time`) over several
repetitions. For context it does the same with the real offline nodes and an in-memory retriever over the demo
corpus. Budget: 0.5 ms of engine CPU per request.

    .venv/bin/python scripts/bench_engine.py [--requests 20000] [--repeats 5] [--real-requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rag.deps import PipelineDeps  # noqa: E402
from rag.engine import CompiledGraph, NodeRegistry, NodeType, compile_workflow  # noqa: E402
from rag.engine.registry import NodeFactory  # noqa: E402
from rag.events import EventChannel, StreamWriter  # noqa: E402
from rag.nodes import NODE_TYPES, build_registry  # noqa: E402
from rag.state import PipelineState, RetrievedChunk  # noqa: E402
from rag.text.tokenize import tokenize  # noqa: E402
from rag.workflows import default_workflow  # noqa: E402

BUDGET_US = 500.0
# The route each trivial node takes: the longest path of the default workflow (retrieve, relevant).
TRIVIAL_ROUTES = {"cache_lookup": "miss", "planner": "retrieve", "retrieval_checker": "relevant"}
QUESTIONS = (
    "如何重設密碼？",
    "How do I reset my password?",
    "我的帳號被鎖住了怎麼辦",
    "如何报名课程？",
    "How do I download my certificate?",
    "請問時數補登申請表在哪裡下載",
    "今天天氣如何",
)


class TrivialNode:
    __slots__ = ("route",)

    def __init__(self, route: str | None) -> None:
        self.route = route

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        return self.route


def trivial_factory(route: str | None) -> NodeFactory:
    return lambda deps, params: TrivialNode(route)


def trivial_registry() -> NodeRegistry:
    """The real catalogue's names, routes, inputs and outputs, with nodes that do nothing."""
    registry = NodeRegistry()
    for real in NODE_TYPES:
        route = TRIVIAL_ROUTES.get(real.name)
        registry.register(
            NodeType(
                name=real.name,
                description=real.description,
                inputs=real.inputs,
                outputs=real.outputs,
                factory=trivial_factory(route),
                routes=real.routes,
            )
        )
    return registry


class CorpusRetriever:
    """Token overlap over the demo corpus, split at "## " headings; only here to give the real nodes text."""

    def __init__(self, folder: Path) -> None:
        self.chunks: list[tuple[frozenset[str], RetrievedChunk]] = []
        for path in sorted(folder.glob("*.md")):
            meta, body = _front_matter(path.read_text(encoding="utf-8"))
            for i, section in enumerate(re.split(r"\n(?=## )", body)):
                heading = section.splitlines()[0].lstrip("# ").strip() if section.strip() else ""
                chunk = RetrievedChunk(
                    chunk_id=f"{path.stem}#{i}",
                    doc_id=path.stem,
                    title=meta.get("title", path.stem),
                    url=meta.get("url", ""),
                    text=section,
                    score=0.0,
                    language=meta.get("language", ""),
                    heading=heading,
                    kind=meta.get("kind", "article"),
                    form_id=meta.get("form_id", ""),
                    form_file=meta.get("form_file", ""),
                )
                self.chunks.append((frozenset(tokenize(f"{chunk.title} {section}")), chunk))

    async def search(
        self, query: str, *, limit: int, language: str | None = None, kind: str | None = None
    ) -> list[RetrievedChunk]:
        wanted = set(tokenize(query))
        if not wanted:
            return []
        scored = []
        for tokens, chunk in self.chunks:
            if (language and chunk.language != language) or (kind and chunk.kind != kind):
                continue
            hits = len(wanted & tokens)
            if hits:
                scored.append((hits / len(wanted), chunk))
        scored.sort(key=lambda pair: -pair[0])
        out = []
        for score, chunk in scored[:limit]:
            copy = RetrievedChunk(**{name: getattr(chunk, name) for name in chunk.__dataclass_fields__})
            copy.score = score
            out.append(copy)
        return out


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    if not text.startswith("---"):
        return {}, text
    head, _, body = text[3:].partition("\n---")
    meta = {}
    for line in head.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            meta[key.strip()] = value.strip()
    return meta, body


async def _drain(channel: EventChannel) -> int:
    count = 0
    while True:
        event = await channel.get(5.0)
        count += 1
        if event["channel"] in ("meta_summary", "error"):
            return count


async def run_requests(graph: CompiledGraph, n: int) -> float:
    """CPU seconds for `n` requests, each with its own state, writer, channel and draining consumer."""
    started = time.process_time()
    for i in range(n):
        request_id = f"r{i}"
        channel = EventChannel()
        writer = StreamWriter(request_id, channel)
        consumer = asyncio.create_task(_drain(channel))
        state = PipelineState(request_id=request_id, question=QUESTIONS[i % len(QUESTIONS)], client_id="bench")
        await graph.run(state, writer)
        writer.finish({"intent": state.intent})
        await consumer
    return time.process_time() - started


def measure(graph: CompiledGraph, n: int, repeats: int) -> list[float]:
    """Microseconds of CPU per request, one figure per repetition (after one warm-up run)."""
    asyncio.run(run_requests(graph, min(n, 500)))
    return [asyncio.run(run_requests(graph, n)) / n * 1e6 for _ in range(repeats)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--real-requests", type=int, default=2000)
    args = parser.parse_args()

    deps = PipelineDeps(retriever=CorpusRetriever(ROOT / "rag" / "corpus" / "demo"))
    trivial = compile_workflow(default_workflow(), registry=trivial_registry(), deps=deps)
    real = compile_workflow(default_workflow(), registry=build_registry(), deps=deps)

    engine = measure(trivial, args.requests, args.repeats)
    offline = measure(real, args.real_requests, args.repeats)
    engine_median = statistics.median(engine)

    print(f"machine: {platform.platform()}; {platform.processor() or platform.machine()}; cpus={os.cpu_count()}")
    print(f"python: {platform.python_implementation()} {platform.python_version()}")
    print(
        f"command: .venv/bin/python scripts/bench_engine.py --requests {args.requests} --repeats {args.repeats} "
        f"--real-requests {args.real_requests}"
    )
    print()
    print("| graph | requests x repeats | median CPU per request | all repeats (µs) |")
    print("|---|---|---|---|")
    print(
        f"| default shape, trivial nodes (engine only) | {args.requests} x {args.repeats} | "
        f"{engine_median:.1f} µs | {', '.join(f'{v:.1f}' for v in engine)} |"
    )
    print(
        f"| default workflow, real offline nodes, in-memory retriever | {args.real_requests} x {args.repeats} | "
        f"{statistics.median(offline):.1f} µs | {', '.join(f'{v:.1f}' for v in offline)} |"
    )
    print()
    verdict = "within" if engine_median <= BUDGET_US else "OVER"
    print(f"engine budget {BUDGET_US:.0f} µs per request: {verdict} ({engine_median:.1f} µs)")


if __name__ == "__main__":
    main()
