"""Questions across languages on the demo help centre: retrieval and offline answers, with and without the
bilingual query expansion.

    .venv/bin/python scripts/eval_cross_language.py [--questions scripts/cross_language_questions.json]
        [--corpus rag/corpus/demo] [--split build|held_out|all] [--variants baseline,glossary-0.5] [--json]
        [--same-language] [--failures]

Each question of the file is asked in one language ("asked") and answered only by an article in the other
("answer_doc"): for each direction, the corpus minus the asker-language twins of the answering articles
("dropped_doc") is indexed in a temporary folder (local Qdrant, the offline lexical embedder, the product's
default sparse search) and every question is asked twice: to the retriever (with the asker's language
preferred, as the pipeline's first search does) for recall@1 and @5 over distinct articles, and to the offline
default workflow for its answer: whether it cites the answering article ("passage"), opens with the
other-language notice ("notice") and holds the gold string ("containment", compared as eval_answers does).

Variants: "baseline" (no expansion); "glossary-W" the built-in glossary's translations at weight W, Chinese
terms as bigrams; "glossary-W-uni" with their single characters too; "glossary-W-massM" each translation weighing
W * max(1, M * the tokens of the term it translates) (M 1 when left out); "-ownS" added: the question's own words
searched as well, and their best passage in the asker's language, when it holds S of the question's terms, put
ahead of the passages the translations lifted above it; "-other" added: the other language's passages searched
alone with the translations as well (rag.retrieval.other_language; the product's setting:
glossary-1.0-mass0.5-own0.5-other).
Prints a markdown table (or JSON lines).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbot.settings")

import django  # noqa: E402

django.setup()

from rag.deps import PipelineConfig, PipelineDeps  # noqa: E402
from rag.evaluation.metrics import AnswerRecord  # noqa: E402
from rag.nodes import build_registry  # noqa: E402
from rag.retrieval.embedding import LexicalEmbedder  # noqa: E402
from rag.retrieval.indexer import build_index  # noqa: E402
from rag.retrieval.markdown import Document, load_markdown_dir  # noqa: E402
from rag.retrieval.other_language import OtherLanguageSearch  # noqa: E402
from rag.retrieval.retriever import StoreRetriever  # noqa: E402
from rag.retrieval.sparse import BM25Encoder, QueryExpansion  # noqa: E402
from rag.retrieval.store import VectorStore  # noqa: E402
from rag.rules import messages  # noqa: E402
from rag.runtime import AskRequest, PipelineRuntime  # noqa: E402
from rag.text.glossary import builtin_glossary  # noqa: E402
from rag.workflows.default import default_workflow  # noqa: E402

CORPUS_LANGUAGE = {"en": "en", "zh": "zh-hant"}
METRICS = ("recall@1", "recall@5", "passage", "notice", "containment")


@dataclass(frozen=True)
class Question:
    id: str
    split: str
    asked: str  # "en" or "zh"
    question: str
    answer_doc: str
    dropped_doc: str
    gold: tuple[str, ...]


def read_questions(path: Path) -> list[Question]:
    items = json.loads(path.read_text(encoding="utf-8"))["questions"]
    return [Question(**(item | {"gold": tuple(item["gold"])})) for item in items]


def encoder_for(variant: str) -> BM25Encoder:
    """The query encoder a variant names (see the module docstring)."""
    if variant == "baseline":
        return BM25Encoder()
    name, weight, *options = variant.split("-")
    known = ("uni", "mass", "own", "other", "within")
    if name != "glossary" or not all(option.startswith(known) for option in options):
        raise ValueError(f"unknown variant {variant!r}")
    mass = _option(options, "mass", 0.0)
    own = _option(options, "own", 0.0)
    expansion = QueryExpansion(
        builtin_glossary(), weight=float(weight), cjk_unigrams="uni" in options, source_mass=mass, own_coverage=own
    )
    return BM25Encoder(expansion=expansion)


def other_for(variant: str) -> OtherLanguageSearch | None:
    """The other-language search a variant names: "-other" (rag.retrieval.other_language); "-withinN": no further
    down than the N-th distinct article (3 unless given). None without "-other"."""
    options = variant.split("-")[2:]
    if "other" not in options:
        return None
    within = int(_option(options, "within", 3.0))
    return OtherLanguageSearch(builtin_glossary(), within=within)


def _option(options: list[str], prefix: str, absent: float) -> float:
    """The number after `prefix` in the variant's options (1 when it has none), `absent` without the option."""
    found = [option.removeprefix(prefix) for option in options if option.startswith(prefix)]
    return float(found[0] or 1) if found else absent


async def ask(runtime: PipelineRuntime, retriever: StoreRetriever, item: Question, *, same: bool) -> dict[str, Any]:
    """One question's scores (each 0 or 1); `same`: the whole corpus is indexed, and the article in the asker's
    language is the one to find (the same-language check, where "notice" counts answers that wrongly open with
    the other-language notice)."""
    target = item.dropped_doc if same else item.answer_doc
    top = await retriever.search(item.question, limit=20, language=CORPUS_LANGUAGE[item.asked])
    ranked = list(dict.fromkeys(chunk.doc_id for chunk in top))
    run = await runtime.start(AskRequest(question=item.question))
    async for _ in run.events():
        pass
    answer = run.state.answer
    record = AnswerRecord(item.id, item.question, answer, item.gold, [], 0.0)
    return {
        "recall@1": int(target in ranked[:1]),
        "recall@5": int(target in ranked[:5]),
        "passage": int(any(source.doc_id == target for source in run.state.sources)),
        "notice": int(answer.startswith(messages.text("other_language", CORPUS_LANGUAGE[item.asked]))),
        "containment": int(record.contains_gold),
    }


def _same(deps: PipelineDeps) -> PipelineDeps:
    return deps


async def measure_direction(
    documents: list[Document],
    questions: list[Question],
    variants: list[str],
    folder: Path,
    *,
    same: bool,
    language_boost: float,
) -> dict[tuple[str, str], dict[str, Any]]:
    """Every variant's scores of the questions (one direction), by (variant, question id)."""
    dropped = set() if same else {item.dropped_doc for item in questions}
    store = VectorStore.open("cross-language-eval", path=folder)
    try:
        build_index([d for d in documents if d.doc_id not in dropped], store, LexicalEmbedder())
        scores = {}
        for variant in variants:
            retriever = StoreRetriever(
                store,
                LexicalEmbedder(),
                encoder=encoder_for(variant),
                language_boost=language_boost,
                other_language=other_for(variant),
            )
            deps = PipelineDeps(retriever=retriever, config=PipelineConfig())
            runtime = PipelineRuntime(
                registry=build_registry(),
                deps_factory=functools.partial(_same, deps),
                default_workflow=default_workflow(),
            )
            for item in questions:
                scores[variant, item.id] = await ask(runtime, retriever, item, same=same)
        return scores
    finally:
        store.close()


def summarise(
    questions: list[Question],
    scores: dict[tuple[str, str], dict[str, Any]],
    variants: list[str],
    splits: list[str],
    metrics: tuple[str, ...],
) -> list[dict[str, Any]]:
    rows = []
    for variant in variants:
        for direction in ("en", "zh"):
            for split in splits:
                chosen = [q for q in questions if q.asked == direction and split in ("all", q.split)]
                if not chosen:
                    continue
                sums = {m: sum(scores[variant, q.id][m] for q in chosen) for m in metrics}
                other = "zh" if direction == "en" else "en"
                rows.append(
                    {"variant": variant, "direction": f"{direction}->{other}", "split": split, "n": len(chosen)}
                    | {m: round(total / len(chosen), 3) for m, total in sums.items()}
                )
    return rows


def markdown(rows: Iterable[dict[str, Any]], metrics: tuple[str, ...]) -> str:
    columns = ["variant", "direction", "split", "n", *metrics]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> None:
    questions = [q for q in read_questions(args.questions) if args.split == "all" or q.split == args.split]
    documents = load_markdown_dir(args.corpus)
    variants = args.variants.split(",")
    scores: dict[tuple[str, str], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for direction in ("en", "zh"):
            asked = [q for q in questions if q.asked == direction]
            if asked:
                place = Path(folder) / direction
                scores |= await measure_direction(
                    documents, asked, variants, place, same=args.same_language, language_boost=args.language_boost
                )
    splits = ["build", "held_out", "all"] if args.split == "all" else [args.split]
    metrics = METRICS
    rows = summarise(questions, scores, variants, splits, metrics)
    if args.same_language:
        rows = [row | {"direction": row["direction"][:2] + " same language"} for row in rows]
    if args.json:
        print("\n".join(json.dumps(row) for row in rows))
    else:
        print(markdown(rows, metrics))
    if args.failures:
        for variant, question_id in sorted(scores):
            if not scores[variant, question_id]["recall@5"]:
                print(f"missed@5 {variant} {question_id}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=Path, default=ROOT / "scripts" / "cross_language_questions.json")
    parser.add_argument("--corpus", type=Path, default=ROOT / "rag" / "corpus" / "demo")
    parser.add_argument("--split", choices=("build", "held_out", "all"), default="all")
    parser.add_argument("--variants", default="baseline,glossary-0.5")
    parser.add_argument(
        "--same-language",
        action="store_true",
        help="the check that expansion costs nothing at home: the whole corpus indexed, the asker-language twin "
        "(dropped_doc) to find and cite",
    )
    parser.add_argument("--language-boost", type=float, default=1.2, help="the retriever's asked-language boost")
    parser.add_argument("--json", action="store_true", help="JSON lines instead of a markdown table")
    parser.add_argument("--failures", action="store_true", help="also list the questions missed at 5")
    asyncio.run(main(parser.parse_args()))
