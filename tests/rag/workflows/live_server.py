"""A real daphne server for end-to-end tests: its own data folder (migrated, indexed) and a staff login."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

PROJECT_DIR = Path(__file__).resolve().parents[3]
USERNAME = "builder"
PASSWORD = "a-long-test-password-7"
ASGI_APP = "chatbot.asgi:application"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def parse_sse(text: str) -> list[dict[str, Any]]:
    events = []
    for frame in text.split("\n\n"):
        data = [line[6:] for line in frame.splitlines() if line.startswith("data: ")]
        if data:
            events.append(json.loads("".join(data)))
    return events


def started_nodes(events: list[dict[str, Any]]) -> list[str]:
    return [e["node"] for e in events if e["channel"] == "status" and e["stage"] == "start"]


@dataclass
class LiveServer:
    url: str
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    log: Any
    clients: list[httpx.Client] = field(default_factory=list)

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(PROJECT_DIR / "manage.py"), *args],
            cwd=PROJECT_DIR,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

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


@contextlib.contextmanager
def live_server() -> Iterator[LiveServer]:
    with tempfile.TemporaryDirectory(prefix="workflows-live-") as data_dir:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "chatbot.settings",
            "DATA_DIR": data_dir,
            "QDRANT_PATH": str(Path(data_dir) / "qdrant"),
            "DATABASE_URL": "",  # the server's own SQLite file, whatever the suite runs against
            "REDIS_PREFIX": f"workflows-{uuid.uuid4().hex[:10]}",
            "RAG_RATE_LIMIT_PER_MINUTE": "0",
            "DJANGO_SUPERUSER_PASSWORD": PASSWORD,
            "PYTHONUNBUFFERED": "1",
        }
        manage = [sys.executable, str(PROJECT_DIR / "manage.py")]
        for command in (
            ["migrate", "--noinput"],
            ["reindex"],
            ["createsuperuser", "--noinput", "--username", USERNAME, "--email", "b@example.org"],
        ):
            subprocess.run([*manage, *command], cwd=PROJECT_DIR, env=env, check=True, capture_output=True, timeout=120)
        port = free_port()
        log = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
        process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), ASGI_APP],
            cwd=PROJECT_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        server = LiveServer(url=f"http://127.0.0.1:{port}", env=env, process=process, log=log)
        try:
            probe = server.client()
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"daphne did not start:\n{server.output()}")
                with contextlib.suppress(httpx.TransportError):
                    if probe.get("/api/v1/health").status_code == 200:
                        break
                time.sleep(0.1)
            yield server
        finally:
            for client in server.clients:
                client.close()
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
            log.close()
