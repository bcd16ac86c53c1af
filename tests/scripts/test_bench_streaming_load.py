"""`scripts/bench_streaming_load.py`'s own parts: ports from its range, the worker's CPU from /proc, the probe's
lag against a real daphne worker, and a doc section replaced in place."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from pathlib import Path

import httpx
import pytest

from scripts import bench_streaming_load as bench
from scripts.cluster import WorkerProcess
from tests.waiting import until_async


def _bound_with_two_free_after() -> socket.socket:
    """A socket bound to a port P whose next two ports were free a moment ago (another process on a busy machine
    may hold any ephemeral port: checked by binding them, then let go just before the test uses them)."""
    for _ in range(50):
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        port = busy.getsockname()[1]
        probes = [socket.socket(), socket.socket()]
        try:
            for offset, probe in enumerate(probes, start=1):
                probe.bind(("127.0.0.1", port + offset))
        except OSError:
            busy.close()
            continue
        finally:
            for probe in probes:
                probe.close()
        return busy
    raise RuntimeError("no port with two free ports after it")


def test_ports_come_from_the_range_skipping_taken_and_busy_ones() -> None:
    with _bound_with_two_free_after() as busy:
        port = busy.getsockname()[1]
        taken: set[int] = set()
        first = bench.port_in_range(port, 3, taken)  # `port` itself is bound: the next one
        assert first == port + 1
        assert bench.port_in_range(port, 3, taken) == port + 2
        with pytest.raises(RuntimeError, match="no free port"):
            bench.port_in_range(port, 3, taken)


def test_cpu_seconds_grow_with_work_done() -> None:
    before = bench.cpu_seconds(os.getpid())
    total = 0
    while bench.cpu_seconds(os.getpid()) - before < 0.05:  # spins until the clock ticks: CPU, not wall time
        total += sum(range(10_000))
    assert total > 0


def test_percentiles_are_in_milliseconds_with_max_and_count() -> None:
    figures = bench.ms_percentiles([0.001 * i for i in range(1, 101)])
    assert figures["p50"] == pytest.approx(50.0, abs=1.0) and figures["max"] == 100.0 and figures["n"] == 100
    assert bench.ms_percentiles([])["n"] == 0


async def wait_healthy(url: str, within: float = 30.0) -> None:
    async with httpx.AsyncClient(timeout=2.0) as client:

        async def status() -> int:
            with contextlib.suppress(httpx.TransportError):
                return (await client.get(url + "/api/v1/health")).status_code
            return 0

        await until_async(status, lambda code: code == 200, within=within, interval=0.1, note=f"no worker on {url}")


@pytest.mark.slow
async def test_the_probe_times_pings_to_a_real_worker(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chatbot.settings",
        "DATA_DIR": str(tmp_path),
        "LOG_LEVEL": "WARNING",
    }
    for name in ("DATABASE_URL", "REDIS_URL", "LLM_BASE_URL"):
        env.pop(name, None)
    env["RAG_PRELOAD"] = "false"
    worker = WorkerProcess(bench.port_in_range(21000, 100, set()), env, tmp_path)
    worker.start()
    try:
        await wait_healthy(worker.url)
        samples = await bench.probe(worker.url.replace("http://", "ws://") + "/ws/chat/", 0.5)
    finally:
        await asyncio.to_thread(worker.stop)
    assert len(samples) >= 5
    assert all(0 < sample < 10.0 for sample in samples)


def test_a_section_is_replaced_in_place_and_a_new_one_appended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = tmp_path / "streaming_load.md"
    monkeypatch.setattr(bench, "DOC", doc)
    doc.write_text(
        "# Title\n\nintro\n\n<!-- section:a -->\nold a\n<!-- end:a -->\n\n<!-- section:b -->\nb\n<!-- end:b -->\n"
    )
    args = type("Args", (), {"label": "a"})()
    bench.write_doc(args, "<!-- section:a -->\nnew a\n<!-- end:a -->\n")
    args.label = "c"
    bench.write_doc(args, "<!-- section:c -->\nc\n<!-- end:c -->\n")
    text = doc.read_text()
    assert "old a" not in text and text.index("new a") < text.index("\nb\n") < text.index("\nc\n")
    assert text.startswith("# Title\n\nintro\n")


def test_each_answers_calls_are_grouped_by_its_question_up_to_its_stream_without_its_summary() -> None:
    def call(question: str, *, stream: bool = False, kind: str = "") -> dict[str, object]:
        body: dict[str, object] = {"messages": [{"role": "user", "content": f"{kind}{question}"}]}
        if stream:
            body["stream"] = True
        return {"endpoint": "chat", "body": body}

    log = [
        call("如何重設密碼？ (#0)", kind="plan: "),
        call("如何重設密碼？ (#0)", stream=True),
        call("How do I download? (#1)", kind="plan: "),
        call("如何重設密碼？ (#0)", kind="summary: "),  # after its answer, interleaved with the next one's calls
        call("How do I download? (#1)", stream=True),
        call("學習時數？ (#2)", kind="plan: "),  # the pass ended before its answer call
    ]
    answers = bench.answers_in_log(log)
    assert [len(calls) for calls in answers] == [2, 2]
    assert all(calls[-1]["body"].get("stream") for calls in answers)
    assert "summary" not in str(answers)


def test_the_ttft_added_is_the_median_of_paired_differences() -> None:
    # Two kinds of question with different planner lengths: the medians of the two sides would mislead.
    assert bench.paired_ttft_added([450.0, 350.0, 452.0, None], [420.0, 320.0, 421.0, 300.0]) == 30.0
    assert bench.paired_ttft_added([None], [300.0]) is None


@pytest.mark.parametrize(
    ("argv", "needs"),
    [
        (["--workers", "2"], "needs a PostgreSQL --database-url (postgres://...) and a --redis-url"),
        (["--workers", "2", "--redis-url", "redis://127.0.0.1:6379/8"], "needs a PostgreSQL --database-url"),
        (["--workers", "3", "--database-url", "sqlite:///x.db", "--redis-url", "redis://r/8"], "PostgreSQL"),
        (["--workers", "2", "--database-url", "postgres://postgres@127.0.0.1:5432/x"], "needs a --redis-url"),
        (["--workers", "0"], "--workers must be at least 1"),
    ],
)
def test_several_workers_are_refused_without_postgresql_and_redis(
    argv: list[str], needs: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(argv)
    assert exit_.value.code == 2
    assert needs in capsys.readouterr().err


def test_one_worker_needs_nothing_and_several_run_on_postgresql_and_redis() -> None:
    assert bench.parse_args([]).workers == 1
    args = bench.parse_args(
        ["--workers", "2", "--database-url", "postgresql://u@h/db", "--redis-url", "redis://127.0.0.1:6379/8"]
    )
    assert args.workers == 2


def test_the_workers_cpu_is_summed_per_answer_with_each_ones_share() -> None:
    figures = bench.cpu_over_workers([10.0, 20.0, 5.0], [10.3, 20.1, 5.6], answers=50)
    assert figures["worker_cpu_s"] == 1.0
    assert figures["cpu_ms_per_answer"] == 20.0  # 1.0 s of CPU over 50 answers
    assert figures["each_s"] == [0.3, 0.1, 0.6]
    assert figures["share"] == [0.3, 0.1, 0.6]
    assert bench.cpu_over_workers([1.0], [1.0], answers=0) == {
        "worker_cpu_s": 0.0,
        "cpu_ms_per_answer": None,
        "each_s": [0.0],
        "share": [None],
    }
    with pytest.raises(ValueError):  # a worker's figure missing on one side
        bench.cpu_over_workers([1.0, 2.0], [1.5], answers=1)


def test_the_loop_lag_of_several_workers_is_the_worst_ones() -> None:
    one = {"p50": 1.0, "p95": 9.0, "p99": 12.0, "max": 40.0, "n": 100}
    two = {"p50": 2.0, "p95": 5.0, "p99": 30.0, "max": 35.0, "n": 90}
    assert bench.worst_lag([one, two]) == {"p50": 2.0, "p95": 9.0, "p99": 30.0, "max": 40.0, "n": 190}
    assert bench.worst_lag([one]) == one


def test_no_password_of_a_url_is_shown() -> None:
    text = bench.redact(
        "--database-url postgres://bench:s3cret@db:5432/h2 --redis-url=redis://:r3dis@127.0.0.1:6379/8 "
        "--x postgres://postgres@127.0.0.1:5432/h2bench"
    )
    assert "s3cret" not in text and "r3dis" not in text
    assert "postgres://bench:***@db:5432/h2" in text and "redis://:***@127.0.0.1:6379/8" in text
    assert "postgres://postgres@127.0.0.1:5432/h2bench" in text


def fake_result(ports: list[int]) -> dict[str, object]:
    lag = {"p50": 1.0, "p95": 2.0, "p99": 3.0, "max": 4.0, "n": 10}
    loaded: dict[str, object] = {
        "cpu_ms_per_answer": 40.0,
        "answers_per_s": 5.0,
        "ttft_ms": lag,
        "total_ms": lag,
        "loop_lag_ms": lag,
        "errors": {},
        "load_average": [1.0, 1.0],
    }
    if len(ports) > 1:
        loaded["workers"] = [{"port": port, "cpu_share": share} for port, share in zip(ports, [0.7, 0.3], strict=False)]
    run = {
        "transport": "sse",
        "loaded": loaded,
        "low": {"ttft_ms": lag, "total_ms": lag},
        "direct_low": {"ttft_ms": lag, "total_ms": lag},
        "ttft_added_paired_ms": 1.5,
    }
    return {"runs": [run], "idle": {"loop_lag_ms": lag, "load_average": 1.0}}


def test_the_section_says_how_many_workers_on_which_database_and_redis() -> None:
    argv = ["--workers", "2", "--transports", "sse", "--database-url", "postgres://u:pw@db/h2bench"]
    args = bench.parse_args([*argv, "--redis-url", "redis://127.0.0.1:6379/8"])
    text = bench.section(args, fake_result([19302, 19303]), "python scripts/bench_streaming_load.py")
    head = text.split("<details>")[0]
    assert "2 daphne workers behind nginx on PostgreSQL `postgres://u:***@db/h2bench`" in head
    assert "Redis `redis://127.0.0.1:6379/8`" in head and "pw" not in head
    assert "through nginx" in head and "loop lag p99 / max ms (worst worker)" in head
    assert "| 19302: 70 % / 19303: 30 % |" in head
    single = bench.section(bench.parse_args(["--transports", "sse"]), fake_result([19302]), "c").split("<details>")[0]
    assert "one daphne worker," in single and "nginx" not in single and "CPU share" not in single
