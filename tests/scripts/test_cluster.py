"""`scripts/cluster.py` and the nginx recipe in deploy/: the rendered configuration is one Debian's nginx accepts,
and answers stream through it from two real daphne workers (SSE unbuffered, resumes on any worker)."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rag.documents.services import MAX_UPLOAD_BYTES
from scripts.cluster import NGINX_SITE, Cluster, free_port, render_main, render_site
from tests.scripts.clusters import NGINX, running_cluster
from tests.stream_clients import ws_ask
from tests.waiting import wait_for

needs_nginx = pytest.mark.skipif(NGINX is None, reason="nginx is not installed (Debian: apt-get install nginx)")


def test_the_site_is_rendered_for_the_workers_ports() -> None:
    text = render_site(NGINX_SITE.read_text(), ports=[9101, 9102, 9103], listen=9100, static_root=Path("/x/static"))
    assert text.count("server 127.0.0.1:91") == 3 and "127.0.0.1:8001" not in text
    assert "listen 127.0.0.1:9100;" in text and "listen 80;" not in text
    assert "alias /x/static/;" in text
    # what makes streaming work behind it
    assert "proxy_buffering off;" in text and "$connection_upgrade" in text
    assert "proxy_next_upstream error timeout http_502 http_503 non_idempotent;" in text


@needs_nginx
def test_nginx_accepts_the_rendered_configuration(tmp_path: Path) -> None:
    assert NGINX is not None
    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp_path / kind).mkdir()
    site = tmp_path / "site.conf"
    site.write_text(render_site(NGINX_SITE.read_text(), ports=[9101], listen=free_port(), static_root=tmp_path))
    main = tmp_path / "nginx.conf"
    main.write_text(render_main(tmp_path, site))
    done = subprocess.run([NGINX, "-t", "-p", str(tmp_path), "-c", str(main)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def body_limit(conf: str) -> int:
    """client_max_body_size of an nginx file, in bytes."""
    match = re.search(r"^\s*client_max_body_size\s+(\d+)([km]?);", conf, re.MULTILINE)
    assert match is not None, "no client_max_body_size"
    return int(match.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[match.group(2)]


@pytest.mark.parametrize("conf", ["helpcentre.conf", "compose.conf"])
def test_the_recipe_bounds_bodies_at_the_apps_upload_limit(conf: str) -> None:
    # the largest upload the app takes, and a megabyte for the multipart form around it
    assert body_limit((NGINX_SITE.parent / conf).read_text()) == MAX_UPLOAD_BYTES + 1024 * 1024


def post_status(port: int, length: int, *, send_body: bool = True) -> int:
    """The status nginx answers a POST of `length` bytes (or one that only announces them)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
        head = f"POST /api/v1/rag/uploads HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n\r\n"
        sock.sendall(head.encode())
        if send_body:
            sock.sendall(b"x" * length)
        status_line = sock.makefile("rb").readline().decode()
    return int(status_line.split()[1])


@needs_nginx
def test_nginx_refuses_a_body_past_the_limit_before_a_worker_reads_it(tmp_path: Path) -> None:
    assert NGINX is not None
    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp_path / kind).mkdir()
    listen = free_port()
    site = tmp_path / "site.conf"
    # the worker's port has nothing behind it: a body nginx lets through ends in 502
    site.write_text(render_site(NGINX_SITE.read_text(), ports=[free_port()], listen=listen, static_root=tmp_path))
    main = tmp_path / "nginx.conf"
    main.write_text(render_main(tmp_path, site))
    nginx = subprocess.Popen([NGINX, "-p", str(tmp_path), "-c", str(main)], stderr=subprocess.PIPE)
    try:
        wait_for(lambda: _listening(listen), within=10.0, note="nginx does not listen")
        # refused on its Content-Length alone: nothing of it is read
        assert post_status(listen, MAX_UPLOAD_BYTES + 2 * 1024 * 1024, send_body=False) == 413
        # the largest file the app takes is let through, to the worker that is not there
        assert post_status(listen, MAX_UPLOAD_BYTES) == 502
    finally:
        nginx.terminate()
        nginx.wait(10)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster("nginx_cluster") as started:
        yield started


def sse(url: str, question: str) -> tuple[list[dict[str, Any]], list[float]]:
    """The events of one SSE answer through nginx, with the time each arrived."""
    events: list[dict[str, Any]] = []
    arrived: list[float] = []
    with httpx.stream("POST", url + "/api/v1/rag/ask/stream_chat", json={"question": question}, timeout=30.0) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                arrived.append(time.monotonic())
    return events, arrived


@pytest.mark.slow
def test_sse_and_websocket_answers_stream_whole_through_nginx_from_every_worker(cluster: Cluster) -> None:
    for _ in range(4):  # round robin: both workers answer
        events, _ = sse(cluster.url, "如何重設密碼？")
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert [e["channel"] for e in events if e["channel"] in ("meta_summary", "error")] == ["meta_summary"]
    for _ in range(2):
        answer = asyncio.run(ws_ask(cluster.url, "How do I download my certificate?", within=30.0))
        assert answer.whole() and answer.terminal is not None, answer.describe()
        assert answer.terminal["channel"] == "meta_summary", answer.describe()
    ready = httpx.get(cluster.url + "/api/v1/ready", timeout=10.0)
    assert ready.status_code == 200, ready.text
    static = httpx.get(cluster.url + "/static/admin/css/base.css", timeout=10.0)
    assert static.status_code == 200 and static.headers["server"].startswith("nginx")
    # Static files go out compressed (the graph builder's script is most of its page's cold load).
    assert static.headers.get("content-encoding") == "gzip"
