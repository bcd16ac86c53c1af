#!/usr/bin/env python
"""Retrieval quality and speed on a SQuAD-format file (e.g. DRCD dev), for each search mode.

Indexes every paragraph as a document (read by the product's SQuAD loader: title = its article's title in the
paragraph's script, paragraphs whole up to 1,000 units) through the product's own path (chunking, BM25, lexical
embedding, a temporary local Qdrant store, `StoreRetriever`), asks every question and checks where
the gold paragraph ranks (chunks are mapped back to their paragraph, first occurrence counts). Prints recall@1/5/10,
MRR, query latency p50/p95 (embedding + search + mapping, one question at a time) and the index build time.
A quick table of every mode in one run; `manage.py eval_retrieval` is the operator's command for one mode.

    .venv/bin/python scripts/eval_drcd_quick.py /work/shared/data/drcd/DRCD_dev.json
    .venv/bin/python scripts/eval_drcd_quick.py FILE --modes sparse,hybrid_rrf --max-questions 300 --engine qdrant
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rag.retrieval.chunking import PASSAGE_CHUNKING, ChunkingConfig  # noqa: E402
from rag.retrieval.embedding import LexicalEmbedder  # noqa: E402
from rag.retrieval.indexer import build_index  # noqa: E402
from rag.retrieval.loaders import SquadQuestion, read_squad  # noqa: E402
from rag.retrieval.markdown import Document, LoadError  # noqa: E402
from rag.retrieval.other_language import OtherLanguageSearch  # noqa: E402
from rag.retrieval.retriever import StoreRetriever  # noqa: E402
from rag.retrieval.sparse import SOURCE_MASS, BM25Encoder, BM25Params, QueryExpansion, query_encoder  # noqa: E402
from rag.retrieval.store import SEARCH_MODES, SearchSettings, VectorStore  # noqa: E402
from rag.text.glossary import builtin_glossary  # noqa: E402
from rag.text.language import EN, ZH_HANS, ZH_HANT, detect_language  # noqa: E402
from rag.text.tokenize import tokenize  # noqa: E402

_CJK_RUN_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def _with_trigrams(text: str) -> list[str]:
    tokens = tokenize(text, bigrams=True, drop_stopwords=True, joins=True)
    for run in _CJK_RUN_RE.findall(text.lower()):
        tokens.extend(run[i : i + 3] for i in range(len(run) - 2))
    return tokens


# BM25 token variants measured against the product's ("default"); see docs/benchmarks/retrieval.md
TOKENS = {
    "default": None,
    "no-joins": lambda text: tokenize(text, bigrams=True, drop_stopwords=True, joins=False),
    "unigrams": lambda text: tokenize(text, bigrams=False, drop_stopwords=True, joins=True),
    "trigrams": _with_trigrams,
}


def load_squad(path: Path, *, titles: str) -> tuple[list[Document], list[SquadQuestion]]:
    """Paragraphs and questions as the product's SQuAD loader reads them (doc ids, titles, language).

    `titles`: "loader" (in the paragraph's script, the product's way), "raw" (as the file spells them), "none".
    """
    errors: list[LoadError] = []
    squad = read_squad(path, doc_prefix=path.stem, language=None, errors=errors)
    for error in errors:
        print(f"skipped {error}", file=sys.stderr)
    documents = squad.documents
    if titles == "none":
        documents = [replace(d, title="") for d in documents]
    elif titles == "raw":
        articles = json.loads(path.read_text(encoding="utf-8"))["data"]
        documents = [replace(d, title=articles[int(d.doc_id.split("/")[-2])]["title"]) for d in documents]
    return documents, squad.questions


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def evaluate(
    retriever: StoreRetriever, questions: list[SquadQuestion], depth: int, *, prefer_language: bool = False
) -> dict[str, float]:
    ranks: list[int] = []
    latencies: list[float] = []
    for question in questions:
        language = search_language(question.text) if prefer_language else None
        started = time.perf_counter()
        chunks = retriever.search_sync(question.text, limit=depth, language=language)
        latencies.append((time.perf_counter() - started) * 1000)
        docs: list[str] = []
        for chunk in chunks:
            if chunk.doc_id not in docs:
                docs.append(chunk.doc_id)
        ranks.append(docs.index(question.doc_id) + 1 if question.doc_id in docs[:10] else 0)
    n = len(ranks)
    return {
        "r1": sum(r == 1 for r in ranks) / n,
        "r5": sum(0 < r <= 5 for r in ranks) / n,
        "r10": sum(0 < r <= 10 for r in ranks) / n,
        "mrr": sum(1 / r for r in ranks if r) / n,
        "p50": statistics.median(latencies),
        "p95": percentile(latencies, 0.95),
    }


def search_language(question: str) -> str | None:
    """The language the pipeline's first search prefers (tool_executor): the question's, in the corpus script."""
    language = detect_language(question)
    if language in (ZH_HANT, ZH_HANS):
        return ZH_HANT
    return EN if language == EN else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="SQuAD-format JSON (data[].paragraphs[].context/qas)")
    parser.add_argument("--modes", default=",".join(SEARCH_MODES), help="comma-separated search modes")
    parser.add_argument("--engine", choices=("auto", "memory", "qdrant"), default="auto")
    parser.add_argument("--max-questions", type=int, default=0, help="ask only the first N questions (0: all)")
    parser.add_argument("--dim", type=int, default=1024, help="lexical embedding dimensions")
    parser.add_argument(
        "--titles",
        choices=("loader", "raw", "none"),
        default="loader",
        help="article titles as the loader gives them (in the paragraph's script), as the file spells them, or none",
    )
    parser.add_argument("--k1", type=float, default=BM25Params().k1, help="BM25 k1")
    parser.add_argument("--b", type=float, default=BM25Params().b, help="BM25 b")
    parser.add_argument("--tokens", choices=sorted(TOKENS), default="default", help="BM25 token variant")
    parser.add_argument(
        "--expansion", type=float, default=0.0, help="bilingual query expansion at this weight (0: off)"
    )
    parser.add_argument(
        "--cross-language",
        choices=("expansion", "all"),
        help="the product's query side across languages: the glossary expansion with the own-words lead "
        "(query_encoder(1.0)), and with 'all' the other language's passages searched with the translations as "
        "well; implies --prefer-language",
    )
    parser.add_argument(
        "--prefer-language",
        action="store_true",
        help="ask with the question's language preferred, as the pipeline's first search does",
    )
    # the SQuAD loader's passage sizes by default; 350/500 are the help-article sizes
    parser.add_argument("--target-units", type=int, default=PASSAGE_CHUNKING.target_units)
    parser.add_argument("--max-units", type=int, default=PASSAGE_CHUNKING.max_units)
    parser.add_argument("--rrf-k", type=int, default=SearchSettings().rrf_k)
    parser.add_argument("--rescore-weight", type=float, default=SearchSettings().rescore_weight)
    args = parser.parse_args()

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(modes) - set(SEARCH_MODES))
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}; known: {', '.join(SEARCH_MODES)}")
    documents, questions = load_squad(args.path, titles=args.titles)
    if args.max_questions:
        questions = questions[: args.max_questions]
    settings = SearchSettings(rrf_k=args.rrf_k, rescore_weight=args.rescore_weight)
    embedder = LexicalEmbedder(dim=args.dim)
    with (
        tempfile.TemporaryDirectory(prefix="eval-drcd-") as folder,
        VectorStore.open("eval", path=folder, engine=args.engine) as store,
    ):
        chunking = ChunkingConfig(target_units=args.target_units, max_units=args.max_units)
        variant = TOKENS[args.tokens]
        params = BM25Params(k1=args.k1, b=args.b)
        glossary = builtin_glossary()
        expansion = (
            QueryExpansion(glossary, weight=args.expansion, source_mass=SOURCE_MASS) if args.expansion > 0 else None
        )
        encoder = (
            BM25Encoder(params, expansion=expansion)
            if variant is None
            else BM25Encoder(params, tokens=variant, expansion=expansion)
        )
        report = build_index(documents, store, embedder, config=chunking, encoder=encoder)
        other = None
        if args.cross_language:
            encoder = query_encoder(1.0)
            other = OtherLanguageSearch(glossary) if args.cross_language == "all" else None
        print(
            f"{args.path.name}: {report.documents} paragraphs -> {report.chunks} chunks, "
            f"{len(questions)} questions; index {report.seconds:.1f} s; engine {args.engine}"
        )
        print(f"{'mode':16} {'R@1':>6} {'hits@1':>6} {'R@5':>6} {'R@10':>6} {'MRR':>6} {'p50 ms':>7} {'p95 ms':>7}")
        for mode in modes:
            retriever = StoreRetriever(
                store,
                embedder,
                mode=mode,
                encoder=encoder,
                settings=settings,
                other_language=other,
            )
            retriever.search_sync("warm-up", limit=1)
            m = evaluate(
                retriever, questions, depth=30, prefer_language=args.prefer_language or bool(args.cross_language)
            )
            print(
                f"{mode:16} {m['r1']:6.4f} {round(m['r1'] * len(questions)):6d} {m['r5']:6.4f} {m['r10']:6.4f} "
                f"{m['mrr']:6.4f} "
                f"{m['p50']:7.2f} {m['p95']:7.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
