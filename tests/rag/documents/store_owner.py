"""A stand-in for the server in tests: opens the vector store through the pipeline runtime (so it holds the local
store's lock), runs the job runner, and answers searches read from stdin ("search <query>" -> a JSON list of the
doc ids found) with the runtime's own retriever. EMBED_HOLD (a file path) holds every embedding batch of a job
while that file exists, so a test decides when a job may get past its embedding; INITIAL_INDEX=1 indexes
CORPUS_DIR at start-up, without a job.

    python tests/rag/documents/store_owner.py   # with DJANGO_SETTINGS_MODULE and the data folder in the env
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


HOLD_AT_MOST = 60.0  # a test that never lets go fails on its own timeouts, and this process does not hang


class HeldEmbedder:
    def __init__(self, inner: Any, hold: Path) -> None:
        self.inner, self.hold = inner, hold

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def embed_documents(self, texts: Any) -> Any:
        from tests.waiting import poll

        poll(lambda: not self.hold.exists(), within=HOLD_AT_MOST)  # goes on either way: never hangs
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Any:
        return self.inner.embed_query(text)


async def main() -> None:
    import django

    django.setup()
    from rag.documents.runner import JobContext, JobRunner, runtime_job_context
    from rag.provider import provide_runtime
    from rag.wiring import get_runtime

    provide_runtime(get_runtime)  # assembled as the server is (chatbot.asgi): the job runner serves this runtime
    runtime = get_runtime()
    await asyncio.to_thread(runtime.preload)  # opens the store, as the server does at start-up
    if os.environ.get("INITIAL_INDEX"):
        # an index built without jobs (like `make run` on an older checkout): no Document rows yet
        from django.conf import settings

        from rag.retrieval.indexer import build_index
        from rag.retrieval.markdown import load_markdown_dir

        deps = await runtime.deps()
        await asyncio.to_thread(
            build_index, load_markdown_dir(settings.CORPUS_DIR), deps.retriever.store, deps.retriever.embedder
        )
    hold = os.environ.get("EMBED_HOLD", "")

    async def context() -> JobContext | None:
        found = await runtime_job_context()
        if found is None or not hold:
            return found
        return JobContext(store=found.store, embedder=HeldEmbedder(found.embedder, Path(hold)), llm=found.llm)

    runner = JobRunner(context_factory=context, poll_interval=0.1, heartbeat_interval=0.5)
    task = asyncio.create_task(runner.run())
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            if line.startswith("search "):
                deps = await runtime.deps()
                hits = await deps.retriever.search(line[len("search ") :].strip(), limit=20)
                print(json.dumps(sorted({hit.doc_id for hit in hits})), flush=True)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        runtime.close()


if __name__ == "__main__":
    asyncio.run(main())
