"""Open WebUI 0.12.4 against the help centre's `/v1`, end to end in Chromium, as a person would use it.

Too heavy for CI (Open WebUI installs ~8 GB of packages): run it by hand for a release note.

    .venv/bin/python scripts/openwebui_e2e.py [--venv /root/.cache/helpcentre-models/openwebui] [--install]

1. Installs Open WebUI 0.12.4 in a venv of its own (`--install`, or when the venv lacks it).
2. Starts a help-centre worker (offline answers, its own data folder, the demo corpus) with `PUBLIC_BASE_URL`, and
   a key from `manage.py apikey create`.
3. Puts a recording proxy in front of the worker's `/v1` (every chat-completion body Open WebUI sends is kept, for
   `tests/chatbot/openai_api/fixtures/open_webui/`), and starts Open WebUI connected to it as the README says
   (offline, Ollama off, its own retrieval bypassed, its defaults otherwise: built-in tools, title, tags and
   follow-up generation on, the task model the chat's own).
4. Drives it with Chromium: 「如何重設密碼？」 and "How do I reset my password?" (streamed, source chips), a
   follow-up, the chat's title, "More Concise", a form's link; screenshots in `docs/screenshots/`.
5. Prints what it saw and what the server recorded (conversations), and exits non-zero if a check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

PROJECT = Path(__file__).resolve().parents[1]
DEFAULT_VENV = Path("/root/.cache/helpcentre-models/openwebui")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VERSION = "0.12.4"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def install(venv: Path) -> Path:
    webui = venv / "venv" / "bin" / "open-webui"
    if webui.exists():
        return webui
    venv.mkdir(parents=True, exist_ok=True)
    python = shutil.which("python3.11") or sys.executable
    subprocess.run([python, "-m", "venv", str(venv / "venv")], check=True)
    subprocess.run([str(venv / "venv/bin/pip"), "install", f"open-webui=={VERSION}"], check=True)
    return webui


def wait_http(url: str, timeout: float, *, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code < 500:
                return
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")


def manage(env: dict[str, str], *command: str) -> str:
    done = subprocess.run(
        [str(PROJECT / ".venv/bin/python"), "manage.py", *command],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@contextlib.contextmanager
def helpcentre(port: int, data: Path) -> Iterator[tuple[dict[str, str], str]]:
    shutil.copytree(PROJECT / "rag/corpus/demo", data / "corpus")
    env = {
        **os.environ,
        "DATA_DIR": str(data),
        "CORPUS_DIR": str(data / "corpus"),
        "DATABASE_URL": "",
        "REDIS_URL": "",
        "QDRANT_URL": "",
        "LLM_BASE_URL": os.environ.get("LLM_BASE_URL", ""),
        "PUBLIC_BASE_URL": f"http://127.0.0.1:{port}",
    }
    manage(env, "migrate", "--noinput")
    manage(env, "reindex")
    key = manage(env, "apikey", "create", "--name", "Open WebUI", "--rate-limit", "60").strip()
    out = open(data / "daphne.log", "wb")  # noqa: SIM115 - closed below
    command = [str(PROJECT / ".venv/bin/python"), "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
    server = subprocess.Popen([*command, "chatbot.asgi:application"], cwd=PROJECT, env=env, stdout=out, stderr=out)
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/health", 90, process=server)
        yield env, key
    finally:
        server.terminate()
        server.wait(20)
        out.close()


class RecordingProxy:
    """HTTP/1.1 to the worker, one request per connection; keeps each `POST /v1/chat/completions` body."""

    def __init__(self, port: int, upstream: int, folder: Path) -> None:
        self.port, self.upstream, self.folder = port, upstream, folder
        self.count = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def start(self) -> RecordingProxy:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.thread.start()
        return self

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        try:
            self.loop.run_forever()
        finally:
            server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
            lines = head.decode("latin-1").split("\r\n")
            length = next(
                (int(v) for k, _, v in (ln.partition(": ") for ln in lines) if k.lower() == "content-length"), 0
            )
            body = await reader.readexactly(length) if length else b""
            if lines[0].startswith("POST /v1/chat/completions"):
                self.count += 1
                (self.folder / f"{self.count:03d}.json").write_bytes(body)
            kept = [ln for ln in lines[1:] if ln and not ln.lower().startswith(("connection:", "keep-alive:"))]
            request = "\r\n".join([lines[0], *kept, "Connection: close", "", ""]).encode("latin-1") + body
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
            up_writer.write(request)
            await up_writer.drain()
            while chunk := await asyncio.wait_for(up_reader.read(65536), 300):
                writer.write(chunk)
                await writer.drain()
            up_writer.close()
        except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
            log(f"proxy: {exc!r}")
        finally:
            writer.close()


@contextlib.contextmanager
def open_webui(webui: Path, port: int, api: str, key: str, data: Path) -> Iterator[None]:
    env = {
        **os.environ,
        "DATA_DIR": str(data),
        "PORT": str(port),
        "WEBUI_AUTH": "False",
        "WEBUI_SECRET_KEY": "e2e-only",
        "OFFLINE_MODE": "True",
        "HF_HUB_OFFLINE": "1",
        "ENABLE_OLLAMA_API": "False",
        "ENABLE_OPENAI_API": "True",
        "OPENAI_API_BASE_URL": api,
        "OPENAI_API_KEY": key,
        "DEFAULT_MODELS": "chat",
        "BYPASS_EMBEDDING_AND_RETRIEVAL": "True",
        "RAG_EMBEDDING_ENGINE": "openai",
        "ENABLE_WEB_SEARCH": "False",
        "ENABLE_VERSION_UPDATE_CHECK": "False",
        "ENABLE_COMMUNITY_SHARING": "False",
        "ANONYMIZED_TELEMETRY": "False",
        "SCARF_NO_ANALYTICS": "true",
        "DO_NOT_TRACK": "true",
    }
    out = open(data / "open-webui.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [str(webui), "serve", "--host", "127.0.0.1", "--port", str(port)], env=env, stdout=out, stderr=out
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 600, process=process)
        yield
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(20)
        if process.poll() is None:
            process.kill()
        out.close()


def conversations(env: dict[str, str]) -> list[str]:
    code = (
        "from chatbot.models import Message\n"
        "for m in Message.objects.filter(role='user').order_by('created_at'): print(repr(m.content[:60]))"
    )
    return [line for line in manage(env, "shell", "-c", code).splitlines() if line.startswith("'")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("venv", nargs="?", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--install", action="store_true", help="install Open WebUI even if the venv has it")
    parser.add_argument("--port", type=int, default=18310, help="the worker; +1 the proxy, +2 Open WebUI")
    parser.add_argument("--screenshots", type=Path, default=PROJECT / "docs/screenshots")
    parser.add_argument("--record", type=Path, default=None, help="where to keep the request bodies")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    webui = install(args.venv) if args.install or not (args.venv / "venv/bin/open-webui").exists() else None
    webui = webui or args.venv / "venv/bin/open-webui"
    from scripts.openwebui_drive import drive  # playwright, imported only when it runs

    with tempfile.TemporaryDirectory(prefix="openwebui-e2e-") as tmp:
        folder = Path(tmp)
        record = args.record or folder / "requests"
        (folder / "hc").mkdir()
        (folder / "owui").mkdir()
        with helpcentre(args.port, folder / "hc") as (env, key):
            proxy = RecordingProxy(args.port + 1, args.port, record).start()
            api = f"http://127.0.0.1:{args.port + 1}/v1"
            log("starting Open WebUI (its first start migrates its database: a minute or two)")
            with open_webui(webui, args.port + 2, api, key, folder / "owui"):
                log(f"Open WebUI answers on http://127.0.0.1:{args.port + 2}")
                report = drive(f"http://127.0.0.1:{args.port + 2}", args.screenshots, args.chromium, CHROMIUM_ARGS)
            report["recorded_questions"] = conversations(env)
            report["requests_seen_by_v1"] = proxy.count
            report["request_bodies"] = str(record)
            print(json.dumps(report, ensure_ascii=False, indent=2))
            with contextlib.suppress(OSError):
                tail = (folder / "hc/daphne.log").read_text(errors="replace").splitlines()[-15:]
                print("\n".join(tail))
    failed = [name for name, ok in report.get("checks", {}).items() if not ok]
    if failed:
        log("failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(PROJECT))
    raise SystemExit(main())
