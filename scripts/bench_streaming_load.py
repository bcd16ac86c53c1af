"""What one daphne worker spends per streamed answer: CPU, event-loop lag, and time added over the SDK alone.

    python scripts/bench_streaming_load.py --users 200 --duration 30 --repeats 3 --label baseline

Starts the LLM simulator and one daphne worker itself (ports from `--port-base`, default 21000-21099), then per
repeat and per transport (SSE, WebSocket):

- a low-load pass (`--low-users`, default 1) through the server and the same questions sent straight to the
  simulator with the openai SDK: the time to first token and the total that the server adds;
- a loaded pass (`--users` closed-loop clients, distinct questions, `manage.py loadtest`'s driver): answers/s,
  TTFT and total p50/p95, the worker's CPU time (utime + stime from /proc) divided by the answers, and the
  event-loop lag seen by a probe in a process of its own (a WebSocket ping to the worker every 20 ms: autobahn
  answers the pong on the worker's event loop, so its round trip is the loop's lag plus a loopback hop).

Writes the run's figures as JSON (`--json`), an SVG plot of the loaded pass, and with `--doc` a section of
docs/benchmarks/streaming_load.md under `--label` (other sections stay). The load average (1 min) is recorded
beside every figure: this machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from concurrency.loadtest.driver import LoadConfig, run_load  # noqa: E402
from concurrency.loadtest.report import summary, write_svg  # noqa: E402
from concurrency.simulator.testing import SimulatorProcess  # noqa: E402
from concurrency.stats import percentile  # noqa: E402
from scripts.cluster import WorkerProcess, prepare  # noqa: E402

OUT = ROOT / "docs" / "benchmarks"
DOC = OUT / "streaming_load.md"
PROBE_INTERVAL = 0.02
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def port_in_range(base: int, span: int, taken: set[int]) -> int:
    """A free loopback port in [base, base + span) that this run has not used yet."""
    for port in range(base, base + span):
        if port in taken:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        taken.add(port)
        return port
    raise RuntimeError(f"no free port in {base}-{base + span - 1}")


class ProfiledWorker(WorkerProcess):
    """The worker under cProfile (its event loop runs in the main thread); the profile is written when it stops."""

    def command(self) -> list[str]:
        return ["-m", "cProfile", "-o", str(self.log_path.with_suffix(".prof")), *super().command()]


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def ms_percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0, "n": 0}
    return {f"p{p}": round(percentile(ordered, p) * 1000, 1) for p in (50, 95, 99)} | {
        "max": round(ordered[-1] * 1000, 1),
        "n": len(ordered),
    }


# --- the probe (a process of its own) ---------------------------------------------------------------------------


async def probe(url: str, seconds: float) -> list[float]:
    import websockets

    origin = url.replace("ws://", "http://").split("/ws/", 1)[0]
    samples: list[float] = []
    async with websockets.connect(url, origin=origin, open_timeout=10, ping_interval=None) as sock:  # type: ignore[arg-type]
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            sent = time.monotonic()
            pong = await sock.ping()
            try:
                await asyncio.wait_for(pong, timeout=10.0)
                samples.append(time.monotonic() - sent)
            except TimeoutError:
                samples.append(10.0)
            await asyncio.sleep(max(0.0, PROBE_INTERVAL - (time.monotonic() - sent)))
    return samples


class Probe:
    def __init__(self, worker_url: str, seconds: float, folder: Path) -> None:
        self.out = folder / f"probe-{time.monotonic_ns()}.json"
        ws = worker_url.replace("http://", "ws://") + "/ws/chat/"
        command = [
            sys.executable,
            __file__,
            "--probe",
            ws,
            "--probe-seconds",
            str(seconds),
            "--probe-out",
            str(self.out),
        ]
        self.process = subprocess.Popen(command, cwd=ROOT)

    def result(self, timeout: float) -> dict[str, float]:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        samples = json.loads(self.out.read_text()) if self.out.exists() else []
        return ms_percentiles(samples)


# --- the same questions straight to the simulator -------------------------------------------------------------


async def direct_sdk(base_url: str, answers: list[list[dict[str, Any]]], users: int, duration: float) -> dict[str, Any]:
    """Replay the LLM calls that the answers of the low-load pass made through the server (`answers`, from the
    simulator's request log), each answer's calls in order, with the SDK: the time to the streamed call's first
    content, and to its end, with no server between. The same questions, so the same prompts and output lengths."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=120.0)
    ttfts: list[float] = []
    totals: list[float] = []
    each: list[float | None] = []  # per replayed answer, in the order of `answers` (the first pass over them)
    started = time.monotonic()
    turn = 0

    async def one_answer(calls: list[dict[str, Any]]) -> float | None:
        t0 = time.monotonic()
        first: float | None = None
        for call in calls:
            body = dict(call["body"])
            stream: Any
            if call["endpoint"].endswith("responses"):
                if body.get("stream"):
                    stream = await client.responses.create(**body)
                    async for event in stream:
                        if first is None and event.type == "response.output_text.delta":
                            first = time.monotonic() - t0
                else:
                    await client.responses.create(**body)
            elif body.get("stream"):
                stream = await client.chat.completions.create(**body)
                async for chunk in stream:
                    if first is None and chunk.choices and chunk.choices[0].delta.content:
                        first = time.monotonic() - t0
            else:
                await client.chat.completions.create(**body)
        if first is not None:
            ttfts.append(first)
            totals.append(time.monotonic() - t0)
        return first

    async def user() -> None:
        nonlocal turn
        while time.monotonic() - started < duration:
            calls = answers[turn % len(answers)]
            turn += 1
            first = await one_answer(calls)
            if turn <= len(answers):
                each.append(first)

    await asyncio.gather(*(user() for _ in range(users)))
    elapsed = time.monotonic() - started
    await client.close()
    return {
        "calls": [call["endpoint"] + (" (stream)" if call["body"].get("stream") else "") for call in answers[0]],
        "answers_replayed": len(answers),
        "answers_per_s": round(len(totals) / elapsed, 3),
        "ttft_ms": ms_percentiles(ttfts),
        "total_ms": ms_percentiles(totals),
        "ttft_each_ms": [round(t * 1000, 1) if t is not None else None for t in each],
    }


def paired_ttft_added(server_each: list[float | None], direct_each: list[float | None]) -> float | None:
    """Median over the low-load answers of (server TTFT - direct TTFT of the same answer's calls): the questions
    differ in their planner's output length, so only answers paired one to one compare like with like."""
    pairs = [s - d for s, d in zip(server_each, direct_each, strict=False) if s is not None and d is not None]
    return round(statistics.median(pairs), 1) if pairs else None


ASK_MARK = re.compile(r"\(#(\d+)\)")  # the load driver numbers each question it asks: "... (#12)"


def answers_in_log(requests: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The LLM requests of each answer, up to and including its streamed answer call (the conversation summary,
    made after it, is left out: it is not on the way to the first token). Grouped by the driver's question number."""
    calls: dict[str, list[dict[str, Any]]] = {}
    complete: list[str] = []
    for request in requests:
        mark = ASK_MARK.search(json.dumps(request["body"], ensure_ascii=False))
        if mark is None or mark.group(1) in complete:
            continue
        calls.setdefault(mark.group(1), []).append(request)
        if request["body"].get("stream"):
            complete.append(mark.group(1))
    return [calls[number] for number in complete]


# --- one pass through the server ---------------------------------------------------------------------------------


def server_pass(
    worker: WorkerProcess,
    transport: str,
    users: int,
    duration: float,
    folder: Path,
    plot: Path | None,
    simulator: SimulatorProcess,
) -> dict[str, Any]:
    """One closed-loop pass. Its CPU is counted until the simulator is idle again, so the work an answer leaves
    behind (its conversation summary, written after the terminal event) is counted with the answer."""
    assert worker.process is not None
    config = LoadConfig(url=worker.url, transport=transport, users=users, duration=duration, answer_timeout=120.0)
    load_before = load_average()
    probe = Probe(worker.url, duration, folder)
    cpu_before = cpu_seconds(worker.process.pid)
    backend_before = simulator.stats()
    run = asyncio.run(run_load(config))
    tail_s = settle(simulator)
    cpu = cpu_seconds(worker.process.pid) - cpu_before
    backend_after = simulator.stats()
    figures = summary(run)
    figures["loop_lag_ms"] = probe.result(timeout=30.0)
    answers = figures["completed"]
    figures["ttft_each_ms"] = [round(r.ttft * 1000, 1) if r.ttft is not None else None for r in run.results]
    figures["worker_cpu_s"] = round(cpu, 3)
    figures["tail_s"] = tail_s
    # Backend work thrown away: calls the simulator started and then saw the client leave (the pass's own, with the
    # tail of summaries it left; the server never has more calls in flight than the simulator's slots, so an
    # aborted call had started decoding).
    figures["backend"] = {
        key: backend_after[key] - backend_before[key] for key in ("attempts", "completed", "aborted", "dropped")
    }
    figures["cpu_ms_per_answer"] = round(cpu * 1000 / answers, 2) if answers else None
    figures["load_average"] = [load_before, load_average()]
    if plot is not None:
        write_svg(run, plot, title=f"one worker, {transport}, {users} closed-loop users")
    return figures


def settle(simulator: SimulatorProcess, timeout: float = 180.0) -> float:
    """Wait until the simulator runs and queues nothing (the last pass's summaries, written after their answers, keep
    it busy for a while), so the next pass and the direct SDK calls start on an idle backend. Returns the wait."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        stats = simulator.stats()
        if not stats["running"] and not stats["waiting"]:
            return round(time.monotonic() - started, 2)
        time.sleep(0.25)
    raise RuntimeError(f"the simulator was still busy {timeout:.0f} s after the pass")


def idle_lag(worker: WorkerProcess, seconds: float, folder: Path) -> dict[str, Any]:
    probe = Probe(worker.url, seconds, folder)
    return {"loop_lag_ms": probe.result(timeout=seconds + 30.0), "load_average": load_average()}


def main_bench(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="bench-streaming-"))
    taken: set[int] = set()
    simulator = SimulatorProcess().start(
        port=port_in_range(args.port_base, 100, taken),
        max_num_seqs=args.max_num_seqs,
        ttft_ms=args.ttft_ms,
        tpot_ms=args.tpot_ms,
        output_tokens=args.output_tokens,
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chatbot.settings",
        "DATA_DIR": str(folder),
        "LLM_BASE_URL": simulator.base_url,
        "LLM_MAX_CONCURRENT_CHAT": str(args.server_limit),
        "LLM_MAX_CONCURRENT_DEFAULT": str(args.server_limit),
        "LLM_MAX_WAITERS": "1000",
        "RAG_SEMANTIC_CACHE_ENABLED": "false",
        "RAG_RATE_LIMIT_PER_MINUTE": "0",
        "RAG_RATE_LIMIT_PER_ADDRESS_PER_MINUTE": "0",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("DATABASE_URL", "REDIS_URL"):
        value = getattr(args, name.lower())
        if value:
            env[name] = value
        else:
            env.pop(name, None)
    prepare(env, static=False, quiet=True)  # as the cluster prepares its workers, without nginx's static files
    worker_class = ProfiledWorker if args.profile else WorkerProcess
    worker = worker_class(port_in_range(args.port_base, 100, taken), env, folder)
    worker.start()
    result: dict[str, Any] = {"runs": []}
    try:
        worker.wait_ready()
        result["idle"] = idle_lag(worker, 5.0, folder)
        for repeat in range(args.repeats):
            for transport in args.transports.split(","):
                settled_s = settle(simulator)
                since = time.time()
                low = server_pass(worker, transport, args.low_users, args.low_duration, folder, None, simulator)
                answers = answers_in_log([r for r in simulator.requests() if r["time"] >= since])
                settled_s += settle(simulator)
                direct_low = asyncio.run(direct_sdk(simulator.base_url, answers, args.low_users, args.low_duration))
                plot = OUT / f"streaming_load_{args.label}_{transport}.svg" if args.doc and repeat == 0 else None
                settled_s += settle(simulator)
                loaded = server_pass(worker, transport, args.users, args.duration, folder, plot, simulator)
                run = {"repeat": repeat, "transport": transport, "low": low, "direct_low": direct_low, "loaded": loaded}
                run["settle_s"] = round(settled_s, 2)
                run["ttft_added_paired_ms"] = paired_ttft_added(low["ttft_each_ms"], direct_low["ttft_each_ms"])
                result["runs"].append(run)
                print(
                    f"{transport} run {repeat + 1}: {loaded['cpu_ms_per_answer']} ms CPU/answer, "
                    f"{loaded['answers_per_s']} answers/s, lag p99 {loaded['loop_lag_ms']['p99']} ms, "
                    f"TTFT added (paired) {run['ttft_added_paired_ms']} ms, "
                    f"load {loaded['load_average']}",
                    flush=True,
                )
    finally:
        worker.stop()
        simulator.stop()
    if args.profile:
        result["profile"] = str(worker.log_path.with_suffix(".prof"))
    return result


# --- the report --------------------------------------------------------------------------------------------------


def medians(runs: list[dict[str, Any]], transport: str) -> dict[str, float]:
    mine = [r for r in runs if r["transport"] == transport]

    def med(path: str) -> float:
        values = []
        for run in mine:
            value: Any = run
            for key in path.split("."):
                value = value[key]
            values.append(float(value or 0.0))
        return round(float(statistics.median(values)), 2)

    return {
        "cpu_ms_per_answer": med("loaded.cpu_ms_per_answer"),
        "answers_per_s": med("loaded.answers_per_s"),
        "ttft_p50": med("loaded.ttft_ms.p50"),
        "ttft_p95": med("loaded.ttft_ms.p95"),
        "total_p50": med("loaded.total_ms.p50"),
        "total_p95": med("loaded.total_ms.p95"),
        "lag_p99": med("loaded.loop_lag_ms.p99"),
        "lag_max": med("loaded.loop_lag_ms.max"),
        "ttft_added": med("ttft_added_paired_ms"),
        "low_ttft": med("low.ttft_ms.p50"),
        "direct_ttft": med("direct_low.ttft_ms.p50"),
        "low_total": med("low.total_ms.p50"),
        "direct_total": med("direct_low.total_ms.p50"),
        "errors": sum(sum(r["loaded"]["errors"].values()) for r in mine),
    }


def section(args: argparse.Namespace, result: dict[str, Any], command: str) -> str:
    idle = result["idle"]
    lines = [
        f"<!-- section:{args.label} -->",
        f"## {args.label}",
        "",
        f"Command: `{command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). Machine: "
        f"{platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}. Simulator "
        f"`--max-num-seqs {args.max_num_seqs} --ttft-ms {args.ttft_ms:g} --tpot-ms {args.tpot_ms:g} "
        f"--output-tokens {args.output_tokens}`, server limit {args.server_limit}, one daphne worker, "
        f"{args.users} closed-loop clients for {args.duration:g} s (low load: {args.low_users} for "
        f"{args.low_duration:g} s), medians over {args.repeats} run(s). Idle loop lag p99 / max "
        f"{idle['loop_lag_ms']['p99']} / {idle['loop_lag_ms']['max']} ms (load average {idle['load_average']}).",
        "",
        "| transport | CPU ms / answer | answers/s | TTFT p50 / p95 ms | total p50 / p95 ms | loop lag p99 / max ms "
        "| TTFT added, low load (paired median; server vs SDK p50) ms | total added, low load ms | errors "
        "| load averages |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for transport in args.transports.split(","):
        m = medians(result["runs"], transport)
        loads = ", ".join(str(r["loaded"]["load_average"][0]) for r in result["runs"] if r["transport"] == transport)
        lines.append(
            f"| {transport} | {m['cpu_ms_per_answer']:.1f} | {m['answers_per_s']:.2f} | "
            f"{m['ttft_p50']:.0f} / {m['ttft_p95']:.0f} | {m['total_p50']:.0f} / {m['total_p95']:.0f} | "
            f"{m['lag_p99']:.0f} / {m['lag_max']:.0f} | {m['ttft_added']:+.1f} "
            f"({m['low_ttft']:.1f} vs {m['direct_ttft']:.1f}) | {m['low_total'] - m['direct_total']:+.1f} | "
            f"{m['errors']} | {loads} |"
        )
    lines += [""]
    for transport in args.transports.split(","):
        lines.append(f"![{args.label}, {transport}](streaming_load_{args.label}_{transport}.svg)")
    lines += ["", "<details><summary>raw figures (JSON)</summary>", "", "```json", json.dumps(result, indent=1)]
    lines += ["```", "", "</details>", f"<!-- end:{args.label} -->", ""]
    return "\n".join(lines)


def write_doc(args: argparse.Namespace, text: str) -> None:
    current = DOC.read_text(encoding="utf-8") if DOC.exists() else "# Streaming under load\n\n"
    start, end = f"<!-- section:{args.label} -->", f"<!-- end:{args.label} -->\n"
    if start in current and end in current:
        before, rest = current.split(start, 1)
        current = before + text + rest.split(end, 1)[1]
    else:
        current = current.rstrip("\n") + "\n\n" + text
    DOC.write_text(current, encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--low-users", type=int, default=1)
    parser.add_argument("--low-duration", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--transports", default="sse,ws")
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--server-limit", type=int, default=16)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--tpot-ms", type=float, default=10.0)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--port-base", type=int, default=21000)
    parser.add_argument("--database-url", default="", help="default: SQLite in a temporary DATA_DIR")
    parser.add_argument("--redis-url", default="", help="default: none (one worker needs no Redis)")
    parser.add_argument("--label", default="run")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--doc", action="store_true", help=f"write the section into {DOC.relative_to(ROOT)}")
    parser.add_argument("--profile", action="store_true", help="run the worker under cProfile (CHATBOT_CPROFILE)")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    parser.add_argument("--probe-seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    parser.add_argument("--probe-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        args.probe_out.write_text(json.dumps(asyncio.run(probe(args.probe, args.probe_seconds))))
        return 0
    command = " ".join(["python scripts/bench_streaming_load.py", *sys.argv[1:]])
    result = main_bench(args)
    result["command"] = command
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    text = section(args, result, command)
    if args.doc:
        write_doc(args, text)
    print(text.split("<details>")[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
