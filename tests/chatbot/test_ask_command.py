"""`manage.py ask`: in this process, and through a running server that holds the store."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command

from chatbot.management.commands import ask as ask_command
from chatbot.models import Message
from devtools.simulator.testing import SimulatorProcess
from rag.server_address import SERVER_FILE, server_address
from tests.devtools.simulator.fixtures import wait_idle_blocking
from tests.rag.pipeline.conftest import pipeline_simulator  # noqa: F401 - fixture, used by name
from tests.waiting import poll

ROOT = Path(__file__).resolve().parents[2]
CLOSED_PORT_URL = "http://127.0.0.1:9"  # discard port: nothing of ours answers there


def run_ask(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("ask", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def json_lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines()]


@pytest.mark.django_db(transaction=True)
def test_json_mode_prints_every_event_as_one_line_ending_with_the_summary() -> None:
    output, _ = run_ask("How do I reset my password?", "--json", "--via", "local")
    events = json_lines(output)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["channel"] == "meta_summary"
    assert events[-1]["sources"]
    # Exactly the stream's text: compact JSON, Chinese left as it is.
    zh_output, _ = run_ask("如何重設密碼？", "--json", "--via", "local", "--backend", "responses")
    assert "\\u" not in zh_output and '"channel":"meta_summary"' in zh_output
    assert json_lines(zh_output)[-1]["backend"] == "responses"
    assert Message.objects.filter(role="assistant", status="ok").count() == 2


@pytest.mark.django_db(transaction=True)
def test_plain_mode_prints_the_answer_sources_and_how_to_continue() -> None:
    output, _ = run_ask("How do I reset my password?", "--via", "local", "--no-color")
    # The offline answer carries its own source list, so the command does not print a second one.
    assert output.count("Sources:") == 1
    assert "[1] How do I reset my password (https://" in output
    assert "intent simple_faq" in output and "backend chat" in output
    conversation_id = output.rsplit("conversation ", 1)[1].split()[0]
    assert uuid.UUID(conversation_id)

    # The CLI's client id is stable, so the conversation continues in a later invocation.
    follow_up, _ = run_ask("Can you make it shorter?", "--via", "local", "--json", "--conversation", conversation_id)
    summary = json_lines(follow_up)[-1]
    assert summary["conversation_id"] == conversation_id
    assert summary["intent"] == "conversation_followup"


@pytest.mark.django_db(transaction=True)
def test_with_llm_base_url_the_command_answers_through_the_simulator(
    pipeline_simulator: SimulatorProcess,  # noqa: F811
    settings: Any,
) -> None:
    settings.LLM_BASE_URL = pipeline_simulator.base_url
    settings.LLM_API_KEY = "test"
    from rag.wiring import reset_runtime

    reset_runtime()  # the runtime of earlier tests was built offline; the command builds it from these settings
    output, _ = run_ask("How do I reset my password?", "--json", "--via", "local")

    events = json_lines(output)
    summary = events[-1]
    assert summary["channel"] == "meta_summary" and summary["backend"] == "chat"
    [plan] = [e for e in events if e.get("stage") == "plan"]
    assert plan["plan_source"] == "llm"
    assert [e["call"] for e in events if e["channel"] == "meta"] == ["plan", "answer"]
    # no model summary: a one-question conversation fits the history window the next turn would see
    assert pipeline_simulator.stats()["attempts"] == 2
    usages = [e["usage"] for e in events if e["channel"] == "meta"]
    assert summary["usage"] == {k: sum(u[k] for u in usages) for k in ("input_tokens", "output_tokens", "total_tokens")}
    assert all(u["input_tokens"] > 0 and u["output_tokens"] > 0 for u in usages)
    # The answer is the simulator's (it cites the numbered sources it was given), not the offline extract.
    assert "".join(e["delta"] for e in events if e["channel"] == "answer").startswith("Summary:")
    stats = wait_idle_blocking(pipeline_simulator)
    assert stats["attempts"] == stats["completed"] == 2 and stats["running"] == 0
    assert Message.objects.filter(role="assistant", status="ok").count() == 1


def test_the_client_id_is_kept_in_the_data_dir(tmp_path: Path) -> None:
    first = ask_command.cli_client_hex(tmp_path)
    assert ask_command.cli_client_hex(tmp_path) == first
    assert (tmp_path / "cli_client_id").stat().st_mode & 0o077 == 0
    (tmp_path / "cli_client_id").write_text("garbage")
    assert ask_command.cli_client_hex(tmp_path) != first


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["   "], "'question' is empty"),
        (["x" * 2001], "the limit is 2000"),
    ],
)
def test_bad_input_exits_with_2(args: list[str], problem: str) -> None:
    with pytest.raises(CommandError, match=problem) as caught:
        run_ask(*args, "--via", "local")
    assert caught.value.returncode == 2


@pytest.mark.django_db(transaction=True)
def test_an_unknown_conversation_exits_with_2() -> None:
    with pytest.raises(CommandError, match="unknown conversation_id") as caught:
        run_ask("hello", "--via", "local", "--conversation", str(uuid.uuid4()))
    assert caught.value.returncode == 2


@pytest.mark.django_db(transaction=True)
def test_a_terminal_error_exits_with_1_naming_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from rag.wiring import get_runtime

    runtime = get_runtime()
    deps = asyncio.run(runtime.deps())

    class RefuseAll:
        async def admit(self, rules: object) -> tuple[bool, float]:
            return False, 5.0

    monkeypatch.setattr(deps, "rate_limiter", RefuseAll())
    runtime.graph_cache.clear()
    try:
        with pytest.raises(CommandError, match=r"^busy: ") as caught:
            run_ask("How do I reset my password?", "--via", "local", "--json")
    finally:
        monkeypatch.undo()
        runtime.graph_cache.clear()
    assert caught.value.returncode == 1


def test_nothing_listening_is_not_a_server() -> None:
    assert not ask_command.server_answers(CLOSED_PORT_URL)


def test_sse_frames_are_parsed_like_a_browser_would() -> None:
    lines = ["id: 1", 'data: {"seq":1}', "", ": keep-alive", "", "id: 2", 'data: {"seq":', "data: 2}", ""]
    assert list(ask_command.iter_sse_events(lines)) == [{"seq": 1}, {"seq": 2}]


# --- against a real server ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def live_server_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    data_dir = tmp_path_factory.mktemp("live-server")
    env = {
        **os.environ,
        "DATA_DIR": str(data_dir),
        "DJANGO_SETTINGS_MODULE": "chatbot.settings",
        "RAG_RATE_LIMIT_PER_MINUTE": "0",
    }
    env.pop("ASK_SERVER_URL", None)
    return env


@pytest.fixture(scope="module")
def live_server_url(live_server_env: dict[str, str]) -> Iterator[str]:
    """daphne on a free loopback port, with a data folder (DB, indexed store) of its own."""
    env = live_server_env
    manage = [sys.executable, str(ROOT / "manage.py")]
    for command in (["migrate", "--noinput"], ["reindex"]):
        subprocess.run([*manage, *command], cwd=ROOT, env=env, check=True, capture_output=True, timeout=60)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "chatbot.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        if not poll(lambda: server.poll() is not None or ask_command.server_answers(url), within=15, interval=0.1):
            raise RuntimeError("daphne did not start within 15 s")
        if server.poll() is not None:
            raise RuntimeError(f"daphne did not start: {server.stderr.read().decode() if server.stderr else ''}")
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=5)


@pytest.mark.slow
def test_through_a_running_server_the_output_is_the_same(live_server_url: str) -> None:
    output, _ = run_ask("How do I reset my password?", "--json", "--server", live_server_url)
    events = json_lines(output)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["channel"] == "meta_summary" and events[-1]["sources"]
    assert events[-1]["backend"] == "chat"

    # The same client id travels in the cookie: the conversation continues through the server.
    conversation_id = events[-1]["conversation_id"]
    follow_up, _ = run_ask("Shorter please", "--json", "--server", live_server_url, "--conversation", conversation_id)
    assert json_lines(follow_up)[-1]["intent"] == "conversation_followup"

    with pytest.raises(CommandError, match="unknown conversation_id") as caught:
        run_ask("hello", "--server", live_server_url, "--conversation", str(uuid.uuid4()))
    assert caught.value.returncode == 2


@pytest.mark.slow
def test_via_server_asks_the_server_whatever_the_probe_says(
    live_server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ask_command, "server_answers", lambda url: False)
    output, _ = run_ask(
        "如何重設密碼？", "--via", "server", "--server", live_server_url, "--backend", "responses", "--no-color"
    )
    assert "資料來源：" in output and "backend responses" in output


@pytest.mark.slow
def test_the_server_streams_sse_over_a_real_socket(live_server_url: str) -> None:
    with httpx.stream(
        "POST",
        live_server_url + "/api/v1/rag/ask/stream",
        json={"question": "How do I reset my password?"},
        timeout=10,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = list(ask_command.iter_sse_events(response.iter_lines()))
    assert events[-1]["channel"] == "meta_summary" and events[-1]["backend"] == "responses"
    assert server_address().url  # what the command uses without --server


@pytest.mark.slow
def test_the_command_finds_the_server_where_it_said_it_listens(
    live_server_url: str, live_server_env: dict[str, str]
) -> None:
    # As after `make run PORT=8200`: the server is not on the default port, and nothing names it to the command.
    record = json.loads((Path(live_server_env["DATA_DIR"]) / SERVER_FILE).read_text())
    assert record["url"] == live_server_url
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "ask", "How do I reset my password?", "--no-color"],
        cwd=ROOT,
        env=live_server_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "reset it yourself online" in done.stdout
    assert f"answered by the server at {live_server_url}" in done.stdout


def test_a_server_that_cannot_be_reached_is_named_with_how_to_choose_another() -> None:
    with pytest.raises(CommandError) as caught:
        run_ask("How do I reset my password?", "--via", "server", "--server", CLOSED_PORT_URL)
    message = str(caught.value)
    assert CLOSED_PORT_URL in message and "--server" in message and "ASK_SERVER_URL" in message
    assert "--via local" in message
    assert caught.value.returncode == 1


@pytest.mark.slow
def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path: Path) -> None:
    # `manage.py ask ... | head -1`: the pipe closes after the first line; no BrokenPipeError traceback.
    env = {**os.environ, "DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "chatbot.settings"}
    env.pop("ASK_SERVER_URL", None)
    manage = [sys.executable, str(ROOT / "manage.py")]
    for command in (["migrate", "--noinput"], ["reindex"]):
        subprocess.run([*manage, *command], cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
    ask = subprocess.Popen(
        [*manage, "ask", "How do I reset my password?", "--json", "--via", "local"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert ask.stdout is not None and ask.stderr is not None
    first = ask.stdout.readline()
    ask.stdout.close()
    stderr = ask.stderr.read().decode()
    assert ask.wait(timeout=60) == 0, stderr
    assert json.loads(first)["seq"] == 1
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr
