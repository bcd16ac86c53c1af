"""Offline answers on the demo help centre: containment, answer length and recall@5, in the question's language
and across languages.

    .venv/bin/python scripts/eval_demo_answers.py [--questions scripts/demo_questions.json]

Every question of the file is asked in English and in zh-hant through the offline default workflow over an index
of rag/corpus/demo built in a temporary folder: first with the whole corpus ("same language"), then with the
article in the question's language left out ("across languages": only its twin in the other language answers
it). Prints one JSON object per setting: recall@5 (the answering article among the retriever's first five
distinct documents), containment (the answer's text, citations and sources left out, holds the gold string,
compared as eval_answers does) and the answer's length in characters (median, mean).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

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
from rag.retrieval.retriever import StoreRetriever  # noqa: E402
from rag.retrieval.store import VectorStore  # noqa: E402
from rag.runtime import AskRequest, PipelineRuntime  # noqa: E402
from rag.wiring import other_language_from_settings, query_encoder_from_settings  # noqa: E402
from rag.workflows.default import default_workflow  # noqa: E402

DEMO = ROOT / "rag" / "corpus" / "demo"
Case = tuple[str, str, tuple[str, ...]]  # question, the article that answers it, gold strings


async def _measure(documents: list[Document], cases: list[Case], folder: Path) -> dict[str, float]:
    store = VectorStore.open("demo-eval", path=folder)
    try:
        build_index(documents, store, LexicalEmbedder())
        # the product's query encoder: RAG_CROSS_LANGUAGE_EXPANSION=false measures without the glossary
        retriever = StoreRetriever(
            store,
            LexicalEmbedder(),
            encoder=query_encoder_from_settings(),
            other_language=other_language_from_settings(),
        )
        deps = PipelineDeps(retriever=retriever, config=PipelineConfig())
        runtime = PipelineRuntime(
            registry=build_registry(), deps_factory=lambda: deps, default_workflow=default_workflow()
        )
        found, held, lengths = 0, 0, []
        for question, doc_id, golds in cases:
            top = await retriever.search(question, limit=20)
            found += doc_id in list(dict.fromkeys(c.doc_id for c in top))[:5]
            run = await runtime.start(AskRequest(question=question))
            async for _ in run.events():
                pass
            record = AnswerRecord(question, question, run.state.answer, golds, [], 0.0)
            held += record.contains_gold
            lengths.append(len(record.body))
        n = len(cases)
        return {
            "questions": n,
            "recall@5": round(found / n, 4),
            "containment": round(held / n, 4),
            "answer_chars_median": statistics.median(lengths),
            "answer_chars_mean": round(statistics.mean(lengths), 1),
        }
    finally:
        store.close()


async def _main(spec: list[dict[str, list[str]]], documents: list[Document]) -> None:
    same = [(item[lang][0], item[lang][1], tuple(item["gold"])) for item in spec for lang in ("en", "zh")]
    with tempfile.TemporaryDirectory() as folder:
        print(json.dumps({"setting": "same language"} | await _measure(documents, same, Path(folder) / "same")))
        for asked, answers in (("en", "zh"), ("zh", "en")):
            dropped = {item[asked][1] for item in spec}
            kept = [d for d in documents if d.doc_id not in dropped]
            cases = [(item[asked][0], item[answers][1], tuple(item["gold"])) for item in spec]
            result = await _measure(kept, cases, Path(folder) / f"cross-{asked}")
            print(json.dumps({"setting": f"across languages: {asked} question, {answers} article"} | result))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=Path, default=ROOT / "scripts" / "demo_questions.json")
    questions = json.loads(parser.parse_args().questions.read_text(encoding="utf-8"))["questions"]
    asyncio.run(_main(questions, load_markdown_dir(DEMO)))
