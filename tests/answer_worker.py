"""A daphne worker that answers through the LLM simulator, for end-to-end tests and scripts of long answers.

`answer_worker_env` prepares what a worker needs (a data folder, a migrated and indexed database, the
simulator's URL, Redis when given) and yields the environment to start `tests.daphne_workers.Worker`s with.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from concurrency.simulator.testing import SimulatorProcess
from tests.daphne_workers import PROJECT_DIR, manage, shared_database

DEMO = PROJECT_DIR / "rag" / "corpus" / "demo"


@contextlib.contextmanager
def llm_simulator(*, tpot_ms: float, output_tokens: int, max_num_seqs: int = 64) -> Iterator[SimulatorProcess]:
    """The simulator streaming `output_tokens` tokens `tpot_ms` apart, whatever the batch (no slowdown)."""
    simulator = SimulatorProcess().start(
        tpot_ms=tpot_ms, ttft_ms=20, output_tokens=output_tokens, max_num_seqs=max_num_seqs, batch_slowdown=0
    )
    try:
        yield simulator
    finally:
        simulator.stop()


@contextlib.contextmanager
def answer_worker_env(
    llm_base_url: str, *, redis_url: str = "", label: str = "answers", **extra: str
) -> Iterator[dict[str, str]]:
    """The environment of workers that answer through `llm_base_url`: their own data folder and database (a fresh
    PostgreSQL database when `DATABASE_URL` points at one, else SQLite), migrated and indexed; Redis keys under a
    prefix of their own, deleted afterwards."""
    with (
        tempfile.TemporaryDirectory(prefix=f"{label}-") as data_dir,
        shared_database(label.replace("-", "_")) as database_url,
    ):
        corpus = Path(data_dir) / "corpus"
        shutil.copytree(DEMO, corpus)
        prefix = f"{label}-{uuid.uuid4().hex[:10]}"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "chatbot.settings",
            "DATA_DIR": data_dir,
            "DATABASE_URL": database_url,
            "CORPUS_DIR": str(corpus),
            "REDIS_URL": redis_url,
            "REDIS_PREFIX": prefix,
            "QDRANT_URL": "",
            "LLM_BASE_URL": llm_base_url,
            "EMBEDDING_BASE_URL": "",
            "LANGFUSE_PUBLIC_KEY": "",
            "LANGFUSE_SECRET_KEY": "",
            "RAG_SEMANTIC_CACHE_ENABLED": "false",
            "RAG_RATE_LIMIT_PER_MINUTE": "0",
            "LLM_MAX_CONCURRENT_CHAT": "64",
            "LLM_MAX_CONCURRENT_RESPONSES": "64",
            "PYTHONUNBUFFERED": "1",
            **extra,
        }
        manage(env, "migrate", "--noinput")
        manage(env, "reindex")
        try:
            yield env
        finally:
            if redis_url:
                _delete_keys(redis_url, prefix)


def _delete_keys(url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=5)
    with contextlib.suppress(redis.RedisError, OSError):
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)
    client.close()
