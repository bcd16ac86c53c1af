"""Real daphne servers for end-to-end tests: a worker environment of their own (`tests.daphne_workers.worker_env`:
data folder, database, migrated and indexed) and a staff login.

`live_server()` is one worker; `live_servers(2, redis_url=...)` is two workers behind one database and one Redis,
as the project scales out, each answering from its own replica of the index the database holds.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.daphne_workers import manage, running_workers, worker_env

USERNAME = "builder"
PASSWORD = "a-long-test-password-7"
QUESTIONS = ("How do I reset my password?", "如何下載報名表？", "How do I change my email address?", "忘記密碼怎麼辦")


def parse_sse(text: str) -> list[dict[str, Any]]:
    events = []
    for frame in text.split("\n\n"):
        data = [line[6:] for line in frame.splitlines() if line.startswith("data: ")]
        if data:
            events.append(json.loads("".join(data)))
    return events


def started_nodes(events: list[dict[str, Any]]) -> list[str]:
    return [e["node"] for e in events if e["channel"] == "status" and e["stage"] == "start"]


def default_shaped(nodes: list[str]) -> bool:
    """The seed workflow's node sequence, whichever branch the question took (a cache hit is shorter)."""
    return nodes[:4] == ["guard", "language_normalizer", "curated_lookup", "cache_lookup"] and nodes[-1] == "telemetry"


@dataclass
class LiveServer:
    url: str
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    log: Any
    clients: list[httpx.Client] = field(default_factory=list)

    def manage(self, *args: str, timeout: float = 120) -> str:
        return manage(self.env, *args, timeout=timeout)

    def client(self) -> httpx.Client:
        client = httpx.Client(base_url=self.url, timeout=30.0)
        self.clients.append(client)
        return client

    def staff_client(self) -> httpx.Client:
        """Logged in through the admin's login form; sends the CSRF token like the builder page does."""
        client = self.client()
        page = client.get("/admin/login/")
        match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert match, page.text[:300]
        response = client.post(
            "/admin/login/",
            data={"username": USERNAME, "password": PASSWORD, "csrfmiddlewaretoken": match.group(1), "next": "/admin/"},
        )
        assert response.status_code == 302, response.text[:500]
        client.headers["X-CSRFToken"] = client.cookies["csrftoken"]
        client.headers["Referer"] = self.url + "/admin/"
        return client

    def ask(self, client: httpx.Client, question: str, *, backend: str = "chat") -> tuple[int, list[dict[str, Any]]]:
        path = "/api/v1/rag/ask/stream_chat" if backend == "chat" else "/api/v1/rag/ask/stream"
        response = client.post(path, json={"question": question})
        return response.status_code, parse_sse(response.text) if response.status_code == 200 else []

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-4000:]


@dataclass(frozen=True)
class Outcome:
    """One question asked by `Askers`: when it was sent and answered, and what came back."""

    started: float
    finished: float
    status: int
    events: list[dict[str, Any]]
    asker: int = 0  # which of the `Askers` asked it

    @property
    def nodes(self) -> list[str]:
        return started_nodes(self.events)

    @property
    def completed(self) -> bool:
        return self.status == 200 and bool(self.events) and self.events[-1]["channel"] == "meta_summary"


class Askers:
    """Clients asking one question after another on their own threads, recording each outcome."""

    def __init__(self, server: LiveServer, count: int) -> None:
        self.server = server
        self.results: list[Outcome] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(count)]

    def _loop(self, index: int) -> None:
        client = self.server.client()
        n = index
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                status, events = self.server.ask(client, QUESTIONS[n % len(QUESTIONS)])
            except BaseException as exc:  # recorded: the test's assertion names it
                with self._lock:
                    self.errors.append(exc)
                return
            with self._lock:
                self.results.append(Outcome(started, time.monotonic(), status, events, index))
            n += 1

    def __enter__(self) -> Askers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)


@contextlib.contextmanager
def live_servers(count: int, *, redis_url: str = "") -> Iterator[list[LiveServer]]:
    """`count` daphne workers on one migrated database and one index, with a staff user (`worker_env`: the suite's
    database server when it runs on PostgreSQL); with `redis_url`, sharing that Redis (its cache and channel layer)
    under a fresh key prefix, skipped when it does not answer."""
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(worker_env("workflows-live", redis_url=redis_url, DJANGO_SUPERUSER_PASSWORD=PASSWORD))
        manage(env, "createsuperuser", "--noinput", "--username", USERNAME, "--email", "b@example.org")
        # one database, one index: every worker answers from its own replica of it
        workers = stack.enter_context(running_workers([env] * count))
        servers = [LiveServer(url=w.url, env=w.env, process=w.process, log=w.log) for w in workers]
        try:
            yield servers
        finally:
            for server in servers:
                for client in server.clients:
                    client.close()


@contextlib.contextmanager
def live_server() -> Iterator[LiveServer]:
    with live_servers(1) as (server,):
        yield server
