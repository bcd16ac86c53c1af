"""`manage.py ask "QUESTION"`: the chat from a terminal, streamed as it arrives.

When a server of ours answers (at --server, ASK_SERVER_URL, or where the running server said it listens:
DATA_DIR/server.json; see rag.server_address) the question goes to it over SSE (it has the pipeline warm, the
deployment's LLM settings and its concurrency limits); otherwise the pipeline runs in this process, on the same
index (the database). Either way the output is the same, and so is the client id (kept in
DATA_DIR/cli_client_id and sent as the `hc_client` cookie), so `--conversation` continues a conversation across
invocations and transports.

Exit status: 0 when the answer completed, 1 on a terminal error (code and message on stderr), 2 on bad input.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urljoin

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from chatbot import security
from chatbot.consumers.common import event_json
from chatbot.routing import sse_path_for_backend
from chatbot.streaming import AskInput, BadRequest, ask_input_parse, exchange_open, pending_records
from chatbot.summaries import pending_summaries
from rag.events import TERMINAL_CHANNELS, Event
from rag.provider import provide_runtime
from rag.runtime import BACKENDS
from rag.server_address import ServerAddress, server_address
from rag.server_address import server_answers as address_answers
from rag.wiring import get_runtime, reset_runtime

PROBE_TIMEOUT = 0.5


def cli_client_hex(data_dir: Path) -> str:
    """This checkout's stable client id (created once; private: it is the key to the CLI's conversations)."""
    path = Path(data_dir) / "cli_client_id"
    with contextlib.suppress(OSError):
        stored = path.read_text(encoding="ascii").strip()
        if security.client_hex_valid(stored):
            return stored.lower()
    value = uuid.uuid4().hex
    tmp = path.with_suffix(".tmp")
    tmp.write_text(value + "\n", encoding="ascii")
    tmp.chmod(0o600)
    tmp.replace(path)
    return value


def server_answers(base_url: str) -> bool:
    """Whether our own server (not just anything) listens at `base_url` (a short probe: a command waits on it)."""
    return address_answers(base_url, timeout=PROBE_TIMEOUT)


def iter_sse_events(lines: Iterable[str]) -> Iterator[Event]:
    """Events from SSE lines (`id:`, `data:` possibly on several lines, blank line ends a frame)."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield json.loads("\n".join(data))
                data = []
            continue
        if line.startswith(":"):
            continue  # comment / keep-alive
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value.removeprefix(" "))
    if data:
        yield json.loads("\n".join(data))


class Renderer:
    """Writes events to the terminal: JSON lines, or the answer as text with its sources."""

    def __init__(self, out: TextIO | OutputWrapper, *, as_json: bool, color: bool, base_url: str) -> None:
        self.out = out
        self.as_json = as_json
        self.color = color
        self.base_url = base_url
        self.answered_by = ""  # "the server at URL" or "this process", said after the summary
        self._mode = ""  # "", "reasoning" or "answer": what the last delta was
        self._answer: list[str] = []

    def event(self, event: Event) -> None:
        if self.as_json:
            self.out.write(event_json(event) + "\n")
            self.out.flush()
            return
        channel = event.get("channel")
        if channel == "reasoning":
            self._switch("reasoning")
            self.out.write(event.get("delta", ""))
        elif channel == "answer":
            self._switch("answer")
            self._answer.append(event.get("delta", ""))
            self.out.write(event.get("delta", ""))
        elif channel == "meta_summary":
            self._switch("")
            self._summary(event)
        elif channel == "error":
            self._switch("")
        self.out.flush()

    def _switch(self, mode: str) -> None:
        if mode == self._mode:
            return
        if self._mode == "reasoning" and self.color:
            self.out.write("\x1b[0m")
        if self._mode:
            self.out.write("\n")
        if mode == "reasoning":
            self.out.write("\x1b[2m" if self.color else "[reasoning] ")
        self._mode = mode

    def _link(self, url: str) -> str:
        return urljoin(self.base_url.rstrip("/") + "/", url) if url.startswith("/") else url

    def _summary(self, event: Event) -> None:
        sources = event.get("sources") or []
        answer = "".join(self._answer)
        # The offline answer ends with its own source list; an LLM's answer only cites [n].
        if sources and not all(source.get("url", "\0") in answer for source in sources):
            self.out.write("\nSources:\n")
            for source in sources:
                line = f"  [{source.get('ref')}] {source.get('title', '')}"
                if source.get("url"):
                    line += f" - {source['url']}"
                if source.get("download_url"):
                    line += f" (download: {self._link(source['download_url'])})"
                self.out.write(line + "\n")
        for attachment in event.get("attachments") or []:
            self.out.write(f"  Download {attachment.get('name', '')}: {self._link(attachment.get('url', ''))}\n")
        usage = event.get("usage") or {}
        parts = [
            f"intent {event.get('intent') or '-'}",
            f"backend {event.get('backend') or '-'}",
            f"language {event.get('language') or '-'}",
            f"{usage.get('total_tokens', 0)} tokens",
            f"{event.get('elapsed_ms', 0):.0f} ms",
        ]
        if event.get("cached"):
            parts.append("cached")
        self.out.write("\n" + " · ".join(parts) + "\n")
        if event.get("conversation_id"):
            self.out.write(f"conversation {event['conversation_id']} (continue with --conversation)\n")
        if self.answered_by:
            self.out.write(f"answered by {self.answered_by}\n")


class Command(BaseCommand):
    help = "Ask the help-centre chatbot a question and stream the answer (JSON lines with --json)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("question")
        parser.add_argument("--backend", choices=BACKENDS, default="chat")
        parser.add_argument("--conversation", default="", help="continue this conversation (id from a summary)")
        parser.add_argument("--json", action="store_true", help="print each event as one JSON line")
        parser.add_argument(
            "--via",
            choices=("auto", "local", "server"),
            default="auto",
            help="auto: the running server if one answers, else this process (default)",
        )
        parser.add_argument(
            "--server",
            default="",
            help="server URL (default: ASK_SERVER_URL, else the address the running server wrote to "
            "DATA_DIR/server.json, else http://127.0.0.1:8000)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        address = server_address(options["server"])
        base_url = address.url
        client_hex = cli_client_hex(settings.DATA_DIR)
        payload = {"question": options["question"], "conversation_id": options["conversation"]}
        try:
            ask = ask_input_parse(payload, backend=options["backend"], client_id=security.CLIENT_PREFIX + client_hex)
        except BadRequest as exc:
            raise CommandError(str(exc), returncode=2) from None
        # Deltas are printed as they come: no newline added after each write.
        self.stdout.ending = ""
        color = not options.get("no_color") and (options.get("force_color") or _isatty(self.stdout))
        renderer = Renderer(self.stdout, as_json=options["json"], color=bool(color), base_url=base_url)

        via = options["via"]
        if via == "auto":
            via = "server" if server_answers(base_url) else "local"
        renderer.answered_by = f"the server at {base_url}" if via == "server" else "this process"
        terminal: Event | None = None
        if via == "local":
            provide_runtime(get_runtime)  # the exchange runs on this process's own runtime, built at the question
            try:
                terminal = asyncio.run(_ask_in_process(ask, renderer))
            finally:
                reset_runtime()  # close the store and its clients now, not at interpreter exit
        else:
            terminal = _ask_server(address, ask, client_hex, renderer)
        _exit_for(terminal)

    def execute(self, *args: Any, **options: Any) -> str | None:
        try:
            return super().execute(*args, **options)
        except BrokenPipeError:
            # `ask ... | head`: the reader left. Point stdout at /dev/null so the interpreter's final flush of
            # the closed pipe raises nothing either, and end quietly as other Unix tools do.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return None


def _isatty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _exit_for(terminal: Event | None) -> None:
    if terminal is None:
        raise CommandError("the stream ended without a terminal event", returncode=1)
    if terminal["channel"] == "error":
        raise CommandError(f"{terminal.get('code')}: {terminal.get('message', '')}", returncode=1)


async def _ask_in_process(ask: AskInput, renderer: Renderer) -> Event | None:
    try:
        exchange = await exchange_open(ask)
    except BadRequest as exc:
        raise CommandError(str(exc), returncode=2) from None
    terminal: Event | None = None
    events = exchange.events()
    try:
        async with contextlib.aclosing(events):
            async for event in events:
                renderer.event(event)
                if event["channel"] in TERMINAL_CHANNELS:
                    terminal = event
                    break
    finally:
        if terminal is None:
            exchange.cancel()
        # The answer and then the conversation summary are written in the background; the loop must not close
        # before they are.
        await pending_records()
        await pending_summaries()
    return terminal


def _ask_server(address: ServerAddress, ask: AskInput, client_hex: str, renderer: Renderer) -> Event | None:
    base_url = address.url
    url = urljoin(base_url.rstrip("/") + "/", sse_path_for_backend(ask.backend).lstrip("/"))
    body: dict[str, str] = {"question": ask.question}
    if ask.conversation_id:
        body["conversation_id"] = ask.conversation_id
    headers = {
        "Accept": "text/event-stream",
        "Cookie": f"{security.CLIENT_COOKIE}={client_hex}",
    }
    # The read timeout is the gap between two events, not the whole answer; the server has its own deadline.
    timeout = httpx.Timeout(connect=5.0, read=settings.RAG_STREAM_TIMEOUT + 10.0, write=10.0, pool=5.0)
    try:
        with (
            httpx.Client(timeout=timeout) as client,
            client.stream("POST", url, json=body, headers=headers) as response,
        ):
            if response.status_code != 200:
                response.read()
                _raise_for_http_error(response)
            terminal: Event | None = None
            for event in iter_sse_events(response.iter_lines()):
                renderer.event(event)
                if event.get("channel") in TERMINAL_CHANNELS:
                    terminal = event
                    break
            return terminal
    except httpx.HTTPError as exc:
        found = "given with --server" if address.origin == "--server" else f"from {address.origin}"
        raise CommandError(
            f"cannot reach the server at {base_url} ({found}): {exc}. Name the server with --server URL or "
            "ASK_SERVER_URL, or answer in this process with --via local.",
            returncode=1,
        ) from None


def _raise_for_http_error(response: httpx.Response) -> None:
    try:
        error = response.json().get("error", {})
        code, message = str(error.get("code", "")), str(error.get("message", ""))
    except (ValueError, AttributeError):
        code, message = "", response.text[:200]
    if response.status_code in (400, 413, 415):
        raise CommandError(message or f"HTTP {response.status_code}", returncode=2)
    if response.status_code == 429:
        retry = response.headers.get("retry-after", "?")
        raise CommandError(f"busy: {message} (retry after {retry} s)", returncode=1)
    raise CommandError(f"{code or 'http_error'}: HTTP {response.status_code} {message}".rstrip(), returncode=1)
