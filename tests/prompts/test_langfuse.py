"""Langfuse as the prompt source: a tiny loopback server speaks the prompt API; failures fall back to the DB."""

from __future__ import annotations

import base64
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

import prompts.selectors as selectors
from prompts.selectors import aprompt_get, langfuse_refreshes, prompt_get

NAME = "planner-system"
PUBLIC_KEY, SECRET_KEY = "pk-lf-test", "sk-lf-test"
WARNING = "Langfuse prompt unavailable"


def _langfuse_prompt(version: int, template: str, label: str = "production") -> dict:
    """The JSON shape of GET /api/public/v2/prompts/{name} for a text prompt."""
    return {
        "type": "text",
        "name": NAME,
        "version": version,
        "prompt": template,
        "config": {"temperature": 0.1, "model": "qwen2.5-7b-instruct"},
        "labels": [label, "latest"],
        "tags": [],
        "commitMessage": "from langfuse",
    }


class FakeLangfuse(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.prompts: dict[tuple[str, str], dict] = {}
        self.requests: list[tuple[str, dict, str]] = []
        self.arrived = threading.Condition()  # notified on each request
        # Cleared, every answer waits for it (at most 10 s): a slow Langfuse.
        self.answering = threading.Event()
        self.answering.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeLangfuse

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = {key: values[0] for key, values in parse_qs(parts.query).items()}
        with self.server.arrived:
            self.server.requests.append((parts.path, query, self.headers.get("Authorization", "")))
            self.server.arrived.notify_all()
        self.server.answering.wait(timeout=10)
        prefix = "/api/public/v2/prompts/"
        prompt = None
        if parts.path.startswith(prefix):
            prompt = self.server.prompts.get((unquote(parts.path[len(prefix) :]), query.get("label", "production")))
        status, body = (200, prompt) if prompt else (404, {"error": "LangfuseNotFoundError", "message": "not found"})
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:  # keep the test output quiet
        pass


@pytest.fixture
def langfuse_server():
    server = FakeLangfuse()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.answering.set()
    assert langfuse_refreshes.wait_idle(10)
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def _use_langfuse(settings, host: str) -> None:
    settings.PROMPT_SOURCE = "langfuse"
    settings.LANGFUSE_PUBLIC_KEY = PUBLIC_KEY
    settings.LANGFUSE_SECRET_KEY = SECRET_KEY
    settings.LANGFUSE_HOST = host
    settings.PROMPT_LANGFUSE_TIMEOUT = 2.0


def _refreshed() -> None:
    """Wait for the background fetches started so far to land in memory."""
    assert langfuse_refreshes.wait_idle(10)


def _requests_reach(server: FakeLangfuse, count: int) -> None:
    """Wait until `count` requests have reached the server."""
    with server.arrived:
        assert server.arrived.wait_for(lambda: len(server.requests) >= count, timeout=10), "requests did not arrive"


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and WARNING in r.getMessage()]


def test_prompt_comes_from_langfuse_with_the_label(settings, langfuse_server):
    # No django_db mark: touching the database would fail the test.
    _use_langfuse(settings, langfuse_server.url)
    langfuse_server.prompts[(NAME, "production")] = _langfuse_prompt(7, "From Langfuse, in {{ language }}.")
    snapshot = prompt_get(name=NAME)
    assert (snapshot.version, snapshot.source, snapshot.labels) == (7, "langfuse", ("production", "latest"))
    assert snapshot.config["model"] == "qwen2.5-7b-instruct"
    assert snapshot.render(language="en", summary="") == "From Langfuse, in en."
    path, query, authorization = langfuse_server.requests[0]
    assert (path, query) == (f"/api/public/v2/prompts/{NAME}", {"label": "production"})
    assert authorization == "Basic " + base64.b64encode(f"{PUBLIC_KEY}:{SECRET_KEY}".encode()).decode()


def test_langfuse_snapshot_is_refreshed_in_the_background_after_its_ttl(settings, langfuse_server, clock):
    _use_langfuse(settings, langfuse_server.url)
    settings.PROMPT_LANGFUSE_CACHE_TTL = 30.0
    langfuse_server.prompts[(NAME, "production")] = _langfuse_prompt(7, "v7 {{language}}")
    assert prompt_get(name=NAME).version == 7
    langfuse_server.prompts[(NAME, "production")] = _langfuse_prompt(8, "v8 {{language}}")
    clock.advance(29.0)
    assert prompt_get(name=NAME).version == 7
    assert len(langfuse_server.requests) == 1
    clock.advance(1.0)
    assert prompt_get(name=NAME).version == 7  # expired: served while the refresh runs
    _refreshed()
    assert prompt_get(name=NAME).version == 8
    assert len(langfuse_server.requests) == 2


def test_an_expired_copy_is_served_at_once_while_one_fetch_refreshes_it(settings, langfuse_server, clock):
    _use_langfuse(settings, langfuse_server.url)
    settings.PROMPT_LANGFUSE_TIMEOUT = 5.0
    settings.PROMPT_LANGFUSE_CACHE_TTL = 30.0
    langfuse_server.prompts[(NAME, "production")] = _langfuse_prompt(7, "v7 {{language}}")
    assert prompt_get(name=NAME).version == 7
    langfuse_server.prompts[(NAME, "production")] = _langfuse_prompt(8, "v8 {{language}}")
    langfuse_server.answering.clear()  # Langfuse turns slow
    clock.advance(31.0)

    assert prompt_get(name=NAME).version == 7
    # Served while the refresh it started still waits on Langfuse (for up to 5 s), not after it.
    assert langfuse_refreshes.in_flight() == 1
    _requests_reach(langfuse_server, 2)  # the refresh is waiting on Langfuse
    # More requests for the expired prompt, from other threads at once: still the stale copy, and no new fetch.
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(prompt_get(name=NAME).version)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=5)
    assert results == [7, 7, 7, 7]
    assert langfuse_refreshes.in_flight() == 1

    langfuse_server.answering.set()
    _refreshed()
    assert prompt_get(name=NAME).version == 8
    assert len(langfuse_server.requests) == 2


async def test_aprompt_get_serves_an_expired_copy_without_a_thread_hop(settings, langfuse_server, clock, monkeypatch):
    _use_langfuse(settings, langfuse_server.url)
    settings.PROMPT_LANGFUSE_CACHE_TTL = 30.0
    langfuse_server.prompts[(NAME, "production")] = _langfuse_prompt(7, "v7 {{language}}")
    first = await aprompt_get(name=NAME)
    langfuse_server.prompts[(NAME, "production")] = _langfuse_prompt(8, "v8 {{language}}")
    langfuse_server.answering.clear()
    clock.advance(31.0)  # expired: nothing to read but memory

    def hop(*args: object) -> None:
        raise AssertionError("an expired copy must be served without waiting on the Langfuse path")

    monkeypatch.setattr(selectors, "_remote_resolve", hop)
    assert await aprompt_get(name=NAME) is first
    _requests_reach(langfuse_server, 2)
    langfuse_server.answering.set()
    _refreshed()
    assert (await aprompt_get(name=NAME)).version == 8


@pytest.mark.django_db
def test_first_load_from_a_slow_langfuse_waits_at_most_the_timeout_then_uses_the_database(settings, langfuse_server):
    _use_langfuse(settings, langfuse_server.url)
    settings.PROMPT_LANGFUSE_TIMEOUT = 0.3
    langfuse_server.prompts[(NAME, "production")] = _langfuse_prompt(7, "v7 {{language}}")
    langfuse_server.answering.clear()
    snapshot = prompt_get(name=NAME)
    assert (snapshot.version, snapshot.source) == (1, "database")
    # It sent its fetch and answered from the database without Langfuse's answer: it stopped waiting on its own.
    _requests_reach(langfuse_server, 1)
    assert not langfuse_server.answering.is_set()


@pytest.mark.django_db
def test_a_failed_refresh_keeps_the_langfuse_copy_and_retries_after_the_ttl(settings, langfuse_server, clock, caplog):
    _use_langfuse(settings, langfuse_server.url)
    settings.PROMPT_LANGFUSE_CACHE_TTL = 30.0
    caplog.set_level(logging.WARNING, logger="prompts")
    langfuse_server.prompts[(NAME, "production")] = _langfuse_prompt(7, "v7 {{language}}")
    assert prompt_get(name=NAME).version == 7
    del langfuse_server.prompts[(NAME, "production")]  # Langfuse now answers 404
    clock.advance(30.0)
    assert prompt_get(name=NAME).version == 7
    _refreshed()
    assert len(_warnings(caplog)) == 1
    for _ in range(3):  # held for another TTL: no fetch per request
        clock.advance(5.0)
        assert (prompt_get(name=NAME).version, prompt_get(name=NAME).source) == (7, "langfuse")
    assert len(langfuse_server.requests) == 2
    clock.advance(15.0)
    assert prompt_get(name=NAME).version == 7
    _refreshed()
    assert len(langfuse_server.requests) == 3


async def test_aprompt_get_fetches_langfuse_off_the_event_loop(settings, langfuse_server):
    _use_langfuse(settings, langfuse_server.url)
    langfuse_server.prompts[(NAME, "staging")] = _langfuse_prompt(9, "staging {{language}}", label="staging")
    snapshot = await aprompt_get(name=NAME, label="staging")
    assert (snapshot.version, snapshot.source) == (9, "langfuse")
    assert await aprompt_get(name=NAME, label="staging") is snapshot
    assert len(langfuse_server.requests) == 1


@pytest.mark.django_db
def test_unreachable_langfuse_falls_back_to_the_database_and_warns_once_per_interval(settings, caplog, clock):
    _use_langfuse(settings, "http://127.0.0.1:9")  # discard port on loopback: connection refused
    settings.PROMPT_LANGFUSE_WARNING_INTERVAL = 60.0
    settings.PROMPT_LANGFUSE_CACHE_TTL = 30.0
    caplog.set_level(logging.WARNING, logger="prompts")
    snapshot = prompt_get(name=NAME)
    assert (snapshot.version, snapshot.source) == (1, "database")
    assert len(_warnings(caplog)) == 1
    assert "ConnectError" in _warnings(caplog)[0]

    clock.advance(31.0)  # the fallback copy expires with the TTL: Langfuse is tried again, without a new warning
    assert prompt_get(name=NAME).source == "database"
    _refreshed()
    assert len(_warnings(caplog)) == 1
    clock.advance(30.0)  # 61 s after the first warning
    assert prompt_get(name=NAME).source == "database"
    _refreshed()
    assert len(_warnings(caplog)) == 2


@pytest.mark.django_db
def test_missing_or_refused_langfuse_prompt_falls_back_to_the_database(settings, langfuse_server, caplog):
    _use_langfuse(settings, langfuse_server.url)
    caplog.set_level(logging.WARNING, logger="prompts")
    assert prompt_get(name=NAME).source == "database"  # 404: not in Langfuse
    assert "NotFoundError" in _warnings(caplog)[0]

    langfuse_server.prompts[(NAME, "latest")] = _langfuse_prompt(3, "Uses {{user_email}}", label="latest")
    snapshot = prompt_get(name=NAME, label="latest")  # a variable the catalogue does not allow
    assert (snapshot.source, snapshot.version) == ("database", 1)
    assert "{{user_email}}" in _warnings(caplog)[-1]


@pytest.mark.django_db
def test_langfuse_source_without_keys_uses_the_database(settings, langfuse_server):
    settings.PROMPT_SOURCE = "langfuse"
    settings.LANGFUSE_PUBLIC_KEY = ""
    settings.LANGFUSE_SECRET_KEY = ""
    settings.LANGFUSE_HOST = langfuse_server.url
    assert prompt_get(name=NAME).source == "database"
    assert langfuse_server.requests == []
