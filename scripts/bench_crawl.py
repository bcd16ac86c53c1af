"""How fast does a website source sync, and how much memory does a crawl take?

A local site of `--pages` help pages (a heading, three paragraphs, a four-row fee table, links to ten other pages,
and a sitemap) is served by a real HTTP server (tests/local_site.py, with ETag and Last-Modified) in a child
process on loopback, so the server does not share the crawler's interpreter. Against it, with a private data
folder (SQLite, the database vector store, the lexical embedder, no LLM):

1. first sync: a sitemap source synced by an index job (crawl, main-text extraction, chunking, embedding, the
   switch, the rows), pages/s over the whole job;
2. re-sync, nothing changed: the same job again; every page is asked for conditionally and answers 304;
3. re-sync with one page in 100 edited.

Memory: the process's resident set size, sampled every 20 ms during each sync (the peak, and the growth over
the process before the sync).

The source's request rate is set to `--rate` (default 1000/s) directly on the row, past the 100/s cap staff can
set, so that the figures measure the crawler and the index job rather than the politeness delay (at the default
2 requests/s a 1,000-page crawl takes 500 s by design).

    .venv/bin/python scripts/bench_crawl.py [--pages 1000] [--rate 1000] [--concurrency 4] [--port 18400]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def page_html(number: int, total: int, *, edition: int = 0) -> str:
    targets = [(number * 7 + k) % total for k in range(10)]
    links = " ".join(f'<a href="/p/{target}.html">page {target}</a>' for target in targets)
    rows = "".join(f"<tr><td>Group {g}</td><td>NT$ {1000 + number + g}</td></tr>" for g in range(4))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Help topic {number}</title></head><body>"
        f"<nav>{links}</nav><main><h1>Help topic {number}</h1>"
        f"<p>This page explains procedure {number} for students and visitors (edition {edition}).</p>"
        f"<h2>Steps</h2><p>Fill in form F-{number} and hand it to the registry office before the deadline.</p>"
        f"<h2>Fees</h2><table><tr><th>Who</th><th>Fee</th></tr>{rows}</table>"
        f"<p>Questions about topic {number} go to the help desk, open 9:00-17:00 on weekdays.</p></main>"
        f"<footer>University help centre</footer></body></html>"
    )


def serve(folder: Path, port: int) -> None:
    """Child process: serve the pages in `folder` (one file per path, reread on each request)."""
    from tests.local_site import LocalSite, Page

    class FolderSite(LocalSite):
        def answer(self, handler):
            file = folder / handler.path.lstrip("/")
            if file.is_file():
                kind = "application/xml" if file.suffix == ".xml" else "text/html; charset=utf-8"
                self.pages[handler.path] = Page(file.read_bytes(), kind, modified=file.stat().st_mtime)
            else:
                self.pages.pop(handler.path, None)
            super().answer(handler)

    site = FolderSite()
    site.port = port
    with site:
        print("ready", flush=True)
        sys.stdin.read()  # until the parent closes the pipe


class RssSampler:
    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def rss() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self.before = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--port", type=int, default=18400)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return

    data = Path(tempfile.mkdtemp(prefix="bench-crawl-"))
    os.environ.update(
        DATA_DIR=str(data), QDRANT_URL="", LLM_BASE_URL="", EMBEDDING_BASE_URL="", DATABASE_URL="", REDIS_URL="",
        LANGFUSE_PUBLIC_KEY="", LANGFUSE_SECRET_KEY="", RAG_PRELOAD="false", LOG_LEVEL="WARNING",
        CORPUS_DIR=str(data / "corpus"),
    )  # fmt: skip
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbot.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from rag.documents.indexing import index_job_execute
    from rag.documents.models import Source, SourceKind
    from rag.documents.services import job_claim, source_create, source_sync_request
    from rag.retrieval.embedding import LexicalEmbedder
    from rag.retrieval.store import open_store_from_settings

    call_command("migrate", verbosity=0)
    site = data / "site"
    (site / "p").mkdir(parents=True)
    base = f"http://127.0.0.1:{args.port}"
    for number in range(args.pages):
        (site / "p" / f"{number}.html").write_text(page_html(number, args.pages))
    locs = "".join(f"<url><loc>{base}/p/{n}.html</loc></url>" for n in range(args.pages))
    (site / "sitemap.xml").write_text(
        f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'
    )
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(site), "--port", str(args.port)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    results: dict[str, object] = {
        "pages": args.pages,
        "rate": args.rate,
        "concurrency": args.concurrency,
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}",
    }
    try:
        source = source_create(
            name="bench", kind=SourceKind.SITEMAP, url=f"{base}/sitemap.xml", internal=True,
            max_pages=args.pages, concurrency=args.concurrency,
        )  # fmt: skip
        Source.objects.filter(pk=source.pk).update(rate=args.rate)  # past the 100/s staff cap: see the docstring
        source.refresh_from_db()
        embedder = LexicalEmbedder()
        with open_store_from_settings() as store:

            def run(label: str) -> None:
                job = source_sync_request(source=source)
                assert job_claim(job=job, runner="bench:1", store_owner=True)
                with RssSampler() as rss:
                    started = time.perf_counter()
                    done = index_job_execute(job=job, store=store, embedder=embedder)
                    seconds = time.perf_counter() - started
                assert done.status == "succeeded", done.error
                results[label] = {
                    "seconds": round(seconds, 2),
                    "pages_per_second": round(args.pages / seconds, 1),
                    "outcomes": done.report.get("outcomes"),
                    "added_updated_unchanged": [done.added, done.updated, done.unchanged],
                    "rss_before_mib": round(rss.before / 2**20, 1),
                    "rss_peak_mib": round(rss.peak / 2**20, 1),
                }
                print(label, json.dumps(results[label]), flush=True)

            run("first_sync")
            run("resync_nothing_changed")
            for number in range(0, args.pages, 100):
                (site / "p" / f"{number}.html").write_text(page_html(number, args.pages, edition=1))
            run("resync_one_in_100_changed")
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=10)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
