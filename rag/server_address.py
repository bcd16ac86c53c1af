"""Where the running server is, for the commands that talk to it (`ask`, `reindex`, `backfill`).

A daphne worker writes its address to DATA_DIR/server.json when it starts (`server_file_write`, from
`chatbot.asgi`) and removes it when it exits. A command finds the server in this order: its `--server` option,
ASK_SERVER_URL, that file (when the process that wrote it is still alive), then http://127.0.0.1:8000. Whatever it
finds is probed (`server_answers`) before it is used, so a stale address costs half a second, not an error.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

import httpx
from django.conf import settings

logger = logging.getLogger(__name__)

SERVICE_NAME = "helpcentre-chatbot"
SERVER_FILE = "server.json"
DEFAULT_URL = "http://127.0.0.1:8000"
PROBE_TIMEOUT = 2.0


@dataclass(frozen=True, slots=True)
class ServerAddress:
    url: str
    origin: str  # how it was found: "--server", "ASK_SERVER_URL", "DATA_DIR/server.json" or "default"


def daphne_url(argv: list[str]) -> str:
    """The http URL a daphne command line binds (`-b HOST -p PORT`), or "" for a socket or fd binding."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-p", "--port", type=int, default=8000)
    parser.add_argument("-b", "--bind", default="127.0.0.1")
    parser.add_argument("-u", "--unix-socket", default="")
    parser.add_argument("--fd", default="")
    parser.add_argument("-e", "--endpoint", action="append", default=[])
    known, _rest = parser.parse_known_args(argv)
    if known.unix_socket or known.fd or known.endpoint:
        return ""
    host = known.bind
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"  # listening everywhere: loopback reaches it
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{known.port}"


def server_file_write(data_dir: Path, url: str) -> None:
    """Record this process as the running server at `url`; the record goes when the process exits."""
    if not url:
        return
    path = Path(data_dir) / SERVER_FILE
    record = {"url": url, "pid": os.getpid()}
    try:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        logger.warning("could not write %s: %s", path, exc)
        return
    atexit.register(_server_file_remove, path, os.getpid())


def _server_file_remove(path: Path, pid: int) -> None:
    # Several workers may share a data folder: only the one whose record it is removes it.
    if _server_file_read(path).get("pid") == pid:
        with contextlib.suppress(OSError):
            path.unlink()


def _server_file_read(path: Path) -> dict[str, object]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _process_alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True


def server_address(explicit: str = "") -> ServerAddress:
    """Where to look for the running server (see the module's docstring for the order)."""
    if explicit:
        return ServerAddress(explicit, "--server")
    if settings.ASK_SERVER_URL:
        return ServerAddress(settings.ASK_SERVER_URL, "ASK_SERVER_URL")
    record = _server_file_read(Path(settings.DATA_DIR) / SERVER_FILE)
    url = record.get("url")
    if isinstance(url, str) and url.startswith(("http://", "https://")) and _process_alive(record.get("pid")):
        return ServerAddress(url, f"{Path(settings.DATA_DIR) / SERVER_FILE}")
    return ServerAddress(DEFAULT_URL, "default")


def server_answers(base_url: str, *, timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether our own server (not just anything) listens at `base_url`. The request also starts its
    background tasks (the job runner among them), which a server without a start-up hook does on its first
    connection."""
    try:
        response = httpx.get(urljoin(base_url.rstrip("/") + "/", "api/v1/health"), timeout=timeout)
        return response.status_code == 200 and response.json().get("service") == SERVICE_NAME
    except (httpx.HTTPError, ValueError, AttributeError):
        return False
