"""Where the commands look for the running server: --server, ASK_SERVER_URL, the server's own file, the default."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from django.test import override_settings

from rag.server_address import DEFAULT_URL, SERVER_FILE, daphne_url, server_address, server_file_write


@pytest.mark.parametrize(
    ("argv", "url"),
    [
        (["-b", "127.0.0.1", "-p", "8200", "chatbot.asgi:application"], "http://127.0.0.1:8200"),
        (["--bind", "0.0.0.0", "--port", "9000", "chatbot.asgi:application"], "http://127.0.0.1:9000"),
        (["chatbot.asgi:application"], "http://127.0.0.1:8000"),
        (["-b", "::1", "-p", "81", "chatbot.asgi:application"], "http://[::1]:81"),
        (["-u", "/run/chat.sock", "chatbot.asgi:application"], ""),
    ],
)
def test_the_url_a_daphne_command_line_listens_on(argv: list[str], url: str) -> None:
    assert daphne_url(argv) == url


def test_the_order_of_the_places_looked_at(tmp_path: Path) -> None:
    with override_settings(DATA_DIR=tmp_path, ASK_SERVER_URL=""):
        assert server_address() == server_address("")
        assert (server_address().url, server_address().origin) == (DEFAULT_URL, "default")
        server_file_write(tmp_path, "http://127.0.0.1:8200")
        assert json.loads((tmp_path / SERVER_FILE).read_text())["pid"] == os.getpid()
        assert server_address().url == "http://127.0.0.1:8200"
        assert server_address("http://10.0.0.2:80").url == "http://10.0.0.2:80"
    with override_settings(DATA_DIR=tmp_path, ASK_SERVER_URL="http://10.0.0.3:8000"):
        assert server_address().origin == "ASK_SERVER_URL"


def test_the_file_of_a_server_that_has_exited_is_ignored(tmp_path: Path) -> None:
    # A pid no process has (beyond the kernel's limit), as a server killed without its clean-up would leave.
    (tmp_path / SERVER_FILE).write_text(json.dumps({"url": "http://127.0.0.1:8200", "pid": 2**22 + 1}))
    with override_settings(DATA_DIR=tmp_path, ASK_SERVER_URL=""):
        assert server_address().url == DEFAULT_URL
