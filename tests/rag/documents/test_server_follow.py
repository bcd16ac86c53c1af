"""The local store held by another process (a stand-in for the server, running the job runner): the reindex
command leaves the job to it, follows its progress, and cancels it with Ctrl-C. Everything runs in subprocesses
on a data folder of their own (SQLite file, local store), as `make run` would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.rag.documents.conftest import CORPUS, write_corpus

pytestmark = pytest.mark.slow
PROJECT = Path(__file__).resolve().parents[3]


@pytest.fixture
def site(tmp_path: Path) -> dict[str, str]:
    corpus = write_corpus(tmp_path / "corpus")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chatbot.settings",
        "DATA_DIR": str(tmp_path / "data"),
        "CORPUS_DIR": str(corpus),
        # a database and a store of their own, whatever the suite runs against
        "DATABASE_URL": "",
        "REDIS_URL": "",
        "QDRANT_URL": "",
        "LLM_BASE_URL": "",
        "EMBEDDING_BASE_URL": "",
        "ASK_SERVER_URL": "http://127.0.0.1:9",
        "RAG_PRELOAD": "false",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=PROJECT, env=env, check=True, timeout=120)
    return env


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120
    )


class Reader:
    """Collects a pipe's bytes as they come (the progress bar has no newlines to wait for)."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.data = b""
        self._pipe = pipe
        self._grown = threading.Condition()  # notified on each chunk, and at the end of the pipe
        self._ended = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while chunk := os.read(self._pipe.fileno(), 4096):
            with self._grown:
                self.data += chunk
                self._grown.notify_all()
        with self._grown:
            self._ended = True
            self._grown.notify_all()

    def wait_for(self, text: str, within: float = 30.0) -> None:
        with self._grown:
            self._grown.wait_for(lambda: text.encode() in self.data or self._ended, timeout=within)
            if text.encode() not in self.data:
                raise AssertionError(f"{text!r} not seen in {self.data.decode(errors='replace')!r}")

    @property
    def text(self) -> str:
        self._thread.join(timeout=5)
        return self.data.decode(errors="replace")


class StoreOwner:
    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("store_owner.py"))],
            cwd=PROJECT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.strip() == "ready", line + self.process.stdout.read()

    def search(self, query: str) -> list[str]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"search {query}\n")
        self.process.stdin.flush()
        while True:
            line = self.process.stdout.readline()
            if line.startswith("["):
                return list(json.loads(line))
            assert line, "the store owner exited"

    def stop(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def hold(tmp_path: Path) -> Path:
    """While this file exists, the store owner's jobs wait before each embedding batch."""
    return tmp_path / "embed-hold"


@pytest.fixture
def owner(site: dict[str, str], hold: Path) -> Iterator[StoreOwner]:
    started = StoreOwner({**site, "EMBED_HOLD": str(hold), "INITIAL_INDEX": "1"})
    yield started
    started.stop()


def _ctrl_c_as_at_a_terminal() -> None:
    # A suite started in the background by a shell script (`make test &` in it) inherits SIGINT ignored, and an
    # ignored signal stays ignored across exec: the command would never see the Ctrl-C this test sends.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def reindex(site: dict[str, str], *args: str) -> tuple[subprocess.Popen[bytes], Reader, Reader]:
    command = subprocess.Popen(
        [sys.executable, "manage.py", "reindex", *args],
        cwd=PROJECT,
        env=site,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_ctrl_c_as_at_a_terminal,
    )
    assert command.stdout is not None and command.stderr is not None
    return command, Reader(command.stdout), Reader(command.stderr)


def test_reindex_follows_the_job_the_store_owner_runs_and_ctrl_c_cancels_it(
    site: dict[str, str], owner: StoreOwner, hold: Path
) -> None:
    corpus = Path(site["CORPUS_DIR"])
    assert "en-waiting" not in owner.search("waiting list")
    (corpus / "en-waiting.md").write_text("---\ntitle: Waiting list\nlanguage: en\n---\n\nWaiting list rules.\n")
    (corpus / "en-enrolment.md").write_text(CORPUS["en-enrolment.md"] + "\nJoin the waiting list.\n")

    # The job waits before embedding until the command has shown that stage; then it runs to its end.
    hold.touch()
    command, out, err = reindex(site)
    out.wait_for("embedding")
    hold.unlink()
    assert command.wait(timeout=60) == 0, out.text + err.text
    assert "runs in the server; following it" in out.text
    assert "100%" in out.text  # the progress bar, drawn with \r
    assert "Documents: 1 added, 1 updated, 4 unchanged, 0 deleted, 0 skipped." in out.text
    # the owner's retriever answers from the new build at once
    assert "en-waiting" in owner.search("waiting list")

    for name, text in CORPUS.items():
        (corpus / name).write_text(text + "\nquokka\n")
    # Ctrl-C while the job embeds. The job cannot get past its embedding before the command has recorded the cancel
    # (it says "Cancelling" once it has), however slow the machine: then it must stop without switching.
    hold.touch()
    command, out, err = reindex(site, "--full")
    out.wait_for("embedding")
    command.send_signal(signal.SIGINT)
    try:
        out.wait_for("Cancelling index job")
    except AssertionError as exc:  # say what the command wrote on stderr (a traceback, if it died)
        command.kill()
        raise AssertionError(f"{exc}\nstderr: {err.text}") from None
    hold.unlink()
    assert command.wait(timeout=60) == 1, out.text + err.text
    assert "was cancelled" in err.text and "live index is unchanged" in err.text
    assert owner.search("quokka") == []
    assert "en-waiting" in owner.search("waiting list")


def test_backfill_without_an_llm_here_leaves_the_job_to_the_server_and_fails_with_it(
    site: dict[str, str], owner: StoreOwner
) -> None:
    # The server's environment decides: this one has no LLM either, so the job fails there, and the command
    # says so with a non-zero exit instead of refusing before asking.
    followed = manage(site, "backfill")
    assert "No LLM is configured here (LLM_BASE_URL is empty): the running server's job runner uses its own." in (
        followed.stdout
    )
    assert followed.returncode == 1, followed.stdout + followed.stderr
    assert "no LLM is configured (LLM_BASE_URL) in the process running jobs" in followed.stderr
