"""Langfuse as the prompt source: a tiny loopback server speaks the prompt API; failures fall back to the DB."""

from __future__ import annotations

import base64
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from prompts.selectors import aprompt_get, prompt_get

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

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeLangfuse

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = {key: values[0] for key, values in parse_qs(parts.query).items()}
        self.server.requests.append((parts.path, query, self.headers.get("Authorization", "")))
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
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def _use_langfuse(settings, host: str) -> None:
    settings.PROMPT_SOURCE = "langfuse"
    settings.LANGFUSE_PUBLIC_KEY = PUBLIC_KEY
    settings.LANGFUSE_SECRET_KEY = SECRET_KEY
    settings.LANGFUSE_HOST = host
    settings.PROMPT_LANGFUSE_TIMEOUT = 2.0


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


def test_langfuse_snapshot_expires_after_its_ttl(settings, langfuse_server, clock):
    _use_langfuse(settings, langfuse_server.url)
    settings.PROMPT_LANGFUSE_CACHE_TTL = 30.0
    langfuse_server.prompts[(NAME, "production")] = _langfuse_prompt(7, "v7 {{language}}")
    assert prompt_get(name=NAME).version == 7
    langfuse_server.prompts[(NAME, "production")] = _langfuse_prompt(8, "v8 {{language}}")
    clock.advance(29.0)
    assert prompt_get(name=NAME).version == 7
    assert len(langfuse_server.requests) == 1
    clock.advance(1.0)
    assert prompt_get(name=NAME).version == 8


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
    assert len(_warnings(caplog)) == 1
    clock.advance(30.0)  # 61 s after the first warning
    assert prompt_get(name=NAME).source == "database"
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
