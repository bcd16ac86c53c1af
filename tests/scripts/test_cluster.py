"""`scripts/cluster.py` and the nginx recipe in deploy/: the rendered configuration is one Debian's nginx accepts,
and answers stream through it from two real daphne workers (SSE unbuffered, resumes on any worker)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from scripts.cluster import NGINX_SITE, Cluster, free_port, render_main, render_site
from tests.scripts.clusters import NGINX, running_cluster
from tests.stream_clients import ws_ask

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
