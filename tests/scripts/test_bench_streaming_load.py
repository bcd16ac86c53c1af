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


def test_ports_come_from_the_range_skipping_taken_and_busy_ones() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
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


async def wait_healthy(url: str, attempts: int = 300) -> None:
    async with httpx.AsyncClient(timeout=2.0) as client:
        for _ in range(attempts):
            with contextlib.suppress(httpx.TransportError):
                if (await client.get(url + "/api/v1/health")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise AssertionError(f"no worker answered on {url}")


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
