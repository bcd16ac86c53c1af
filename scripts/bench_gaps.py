"""How long does grouping content gaps take at 100,000 logged questions, and does an update stay incremental?

A fresh database (a temporary SQLite file, or the PostgreSQL database named by `--database-url`) is filled with
`--questions` logged exchanges (default 100,000): every one a refused answer, their questions made from
`--topics` underlying topics (default 400) in English and Traditional Chinese, each asked in several wordings with
noise words, as a help centre's unanswered questions look. Then:

- backlog: `gaps_update` run until it has taken in everything (5,000 a batch, as the worker task does), timed per
  batch and in total, with the offline lexical embedding (`--dim`, default 256) or nothing else;
- incremental: 100 more questions logged, one more update timed (what a worker pays every few minutes);
- idle: an update with nothing new timed (what every worker pays when another one got there first);
- the report: `gaps_report()` timed, and how many topics the questions went into.

    .venv/bin/python scripts/bench_gaps.py [--questions 100000] [--topics 400] [--database-url postgres://...]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--topics", type=int, default=400)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--database-url", default="")
    return parser.parse_args()


ARGS = _parse()
_DATA = Path(tempfile.mkdtemp(prefix="bench-gaps-"))
os.environ.update(
    DATA_DIR=str(_DATA), DATABASE_URL=ARGS.database_url, REDIS_URL="", QDRANT_URL="", LLM_BASE_URL="", DEBUG="false"
)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbot.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from chatbot.gaps import gaps_report, gaps_update  # noqa: E402
from chatbot.models import Conversation, Message  # noqa: E402
from rag.retrieval.embedding import LexicalEmbedder  # noqa: E402

EN_SUBJECTS = ["dog", "parking", "lunch", "wifi", "locker", "shuttle", "printer", "refund", "badge", "umbrella"]
EN_PLACES = ["exam centre", "workshop", "library", "training centre", "campus", "lecture hall", "lab", "office"]
ZH_SUBJECTS = ["狗", "停車", "午餐", "無線網路", "置物櫃", "接駁車", "印表機", "退費", "識別證", "雨傘"]
ZH_PLACES = ["考場", "工作坊", "圖書館", "訓練中心", "校園", "演講廳", "實驗室", "辦公室"]
EN_FORMS = ["Is there {s} at the {p}?", "can I get {s} at the {p}", "{s} at the {p}, is it possible?"]
ZH_FORMS = ["{p}有{s}嗎？", "{p}可以有{s}嗎？", "請問{p}有沒有{s}？"]
NOISE = ["please", "today", "again", "quickly", "now"]


def _questions(count: int, topics: int, rng: random.Random) -> list[tuple[str, str]]:
    combos = [(s, p) for s in range(len(EN_SUBJECTS)) for p in range(len(EN_PLACES))]
    rng.shuffle(combos)
    chosen = (combos * (topics // len(combos) + 1))[:topics]
    out = []
    for _ in range(count):
        s, p = rng.choice(chosen)
        if rng.random() < 0.5:
            text = rng.choice(EN_FORMS).format(s=EN_SUBJECTS[s], p=EN_PLACES[p])
            out.append((text + (" " + rng.choice(NOISE) if rng.random() < 0.3 else ""), "en"))
        else:
            out.append((rng.choice(ZH_FORMS).format(s=ZH_SUBJECTS[s], p=ZH_PLACES[p]), "zh-hant"))
    return out


def _log(questions: list[tuple[str, str]]) -> None:
    now = timezone.now()
    with transaction.atomic():
        conversation = Conversation.objects.create(client_id="bench", title="bench")
        rows = []
        for question, language in questions:
            request_id = uuid.uuid4().hex
            rows.append(Message(conversation=conversation, role="user", content=question, request_id=request_id))
            rows.append(
                Message(
                    conversation=conversation,
                    role="assistant",
                    content="-",
                    request_id=request_id,
                    outcome="refused",
                    language=language,
                    created_at=now,
                )
            )
        Message.objects.bulk_create(rows, batch_size=5000)


def main() -> None:
    rng = random.Random(7)
    call_command("migrate", verbosity=0)
    embedder = LexicalEmbedder(dim=ARGS.dim)
    started = time.perf_counter()
    _log(_questions(ARGS.questions, ARGS.topics, rng))
    print(f"logged {ARGS.questions} questions in {time.perf_counter() - started:.1f} s")

    batches = []
    while True:
        t0 = time.perf_counter()
        placed = gaps_update(embed=embedder.embed_documents, dim=embedder.dim)
        if not placed:
            break
        batches.append((placed, time.perf_counter() - t0))
    total = sum(seconds for _, seconds in batches)
    print(f"backlog: {sum(n for n, _ in batches)} questions in {len(batches)} batches, {total:.1f} s "
          f"({total / max(1, sum(n for n, _ in batches)) * 1000:.2f} ms a question); "
          f"first batch {batches[0][1]:.2f} s, last {batches[-1][1]:.2f} s")  # fmt: skip

    _log(_questions(100, ARGS.topics, rng))
    t0 = time.perf_counter()
    placed = gaps_update(embed=embedder.embed_documents, dim=embedder.dim)
    print(f"incremental: {placed} new questions in {(time.perf_counter() - t0) * 1000:.0f} ms")
    t0 = time.perf_counter()
    gaps_update(embed=embedder.embed_documents, dim=embedder.dim)
    print(f"idle update: {(time.perf_counter() - t0) * 1000:.1f} ms")
    t0 = time.perf_counter()
    report = gaps_report(limit=100)
    from chatbot.models import GapTopic

    print(f"report: top 100 of {GapTopic.objects.count()} topics in {(time.perf_counter() - t0) * 1000:.0f} ms; "
          f"largest {report[0]['count']} questions")  # fmt: skip
    print(
        f"underlying topics: {ARGS.topics} (x2 languages); database: {'PostgreSQL' if ARGS.database_url else 'SQLite'}"
    )
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")


if __name__ == "__main__":
    main()
