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

With `--workers N` (N >= 2; needs `--redis-url` and a PostgreSQL `--database-url`) it starts N workers behind
nginx (`scripts/cluster.py`'s `Cluster`) and sends the load, the low-load pass included, through nginx: the CPU per
answer is then the sum over the workers' processes, each worker's share of it is shown (an unbalanced proxy shows
there), and there is one probe per worker, straight to its own port, the lag reported being the max over them.

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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from concurrency.stats import percentile  # noqa: E402
from devtools.loadtest.driver import LoadConfig, run_load  # noqa: E402
from devtools.loadtest.report import summary, write_svg  # noqa: E402
from devtools.simulator.testing import SimulatorProcess  # noqa: E402
from scripts.cluster import Cluster, WorkerProcess, prepare  # noqa: E402

OUT = ROOT / "docs" / "benchmarks"
DOC = OUT / "streaming_load.md"
PROBE_INTERVAL = 0.02
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*):[^@/\s]*@", re.I)


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


@dataclass
class Target:
    """Where the load goes (`url`: the one worker, or nginx in front of the cluster's) and the workers measured."""

    url: str
    workers: list[WorkerProcess]
    cluster: Cluster | None = None

    def start(self) -> None:
        if self.cluster is not None:
            self.cluster.start()  # the workers, ready, then nginx, answering
            return
        for worker in self.workers:
            worker.start()
            worker.wait_ready()

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()  # the workers (each draining), then nginx
            return
        for worker in self.workers:
            worker.stop()

    def cpu_seconds(self) -> list[float]:
        pids = [worker.process.pid for worker in self.workers if worker.process is not None]
        assert len(pids) == len(self.workers), "a worker is not running"
        return [cpu_seconds(pid) for pid in pids]

    def probes(self, seconds: float, folder: Path) -> list[Probe]:
        """Probes of the workers' loop lag over the next `seconds`: one per worker, straight to its own port (never
        through nginx, whose hop would be counted as lag)."""
        return [Probe(worker.url, seconds, folder) for worker in self.workers]

    def per_worker(self, **figures: Sequence[Any]) -> list[dict[str, Any]]:
        """`figures` (name: one value per worker, in order) as one entry per worker, named by its port."""
        return [
            {"port": worker.port, **{name: values[i] for name, values in figures.items()}}
            for i, worker in enumerate(self.workers)
        ]


def make_target(args: argparse.Namespace, env: dict[str, str], folder: Path, taken: set[int]) -> Target:
    """One worker on its own, or `--workers` behind nginx; every port from `--port-base`'s range."""
    worker_class = ProfiledWorker if args.profile else WorkerProcess
    if args.workers == 1:
        worker = worker_class(port_in_range(args.port_base, 100, taken), env, folder)
        return Target(worker.url, [worker])
    cluster = Cluster(
        workers=args.workers,
        port=port_in_range(args.port_base, 100, taken),
        env=env,
        folder=folder / "cluster",
        worker_ports=[port_in_range(args.port_base, 100, taken) for _ in range(args.workers)],
        worker_class=worker_class,
    )
    return Target(cluster.url, cluster.workers, cluster)


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def cpu_over_workers(before: Sequence[float], after: Sequence[float], answers: int) -> dict[str, Any]:
    """The workers' CPU over a pass, from each one's /proc figures before and after it: the sum in seconds, the sum
    per answer completed in ms, and each worker's seconds and share of the sum (in the workers' order)."""
    spent = [end - start for start, end in zip(before, after, strict=True)]
    total = sum(spent)
    return {
        "worker_cpu_s": round(total, 3),
        "cpu_ms_per_answer": round(total * 1000 / answers, 2) if answers else None,
        "each_s": [round(seconds, 3) for seconds in spent],
        "share": [round(seconds / total, 3) if total > 0 else None for seconds in spent],
    }


def worst_lag(per_worker: Sequence[dict[str, float]]) -> dict[str, float]:
    """The workers' probe figures as one: each percentile and the max the worst worker's, the samples summed (one
    worker's figures come back as they are)."""
    combined = {key: max(figures[key] for figures in per_worker) for key in per_worker[0]}
    combined["n"] = sum(figures["n"] for figures in per_worker)
    return combined


def redact(text: str) -> str:
    """`text` with the password of every URL in it replaced by ***."""
    return URL_PASSWORD.sub(r"\1:***@", text)


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
    target: Target,
    transport: str,
    users: int,
    duration: float,
    folder: Path,
    plot: Path | None,
    simulator: SimulatorProcess,
) -> dict[str, Any]:
    """One closed-loop pass. Its CPU is counted until the simulator is idle again, so the work an answer leaves
    behind (its conversation summary, written after the terminal event) is counted with the answer. With several
    workers the load goes through nginx, and the CPU is the sum over the workers."""
    config = LoadConfig(url=target.url, transport=transport, users=users, duration=duration, answer_timeout=120.0)
    load_before = load_average()
    probes = target.probes(duration, folder)
    cpu_before = target.cpu_seconds()
    backend_before = simulator.stats()
    run = asyncio.run(run_load(config))
    tail_s = settle(simulator)
    cpu_after = target.cpu_seconds()
    backend_after = simulator.stats()
    figures = summary(run)
    lags = [probe.result(timeout=30.0) for probe in probes]
    figures["loop_lag_ms"] = worst_lag(lags)
    cpu = cpu_over_workers(cpu_before, cpu_after, figures["completed"])
    figures["ttft_each_ms"] = [round(r.ttft * 1000, 1) if r.ttft is not None else None for r in run.results]
    figures["worker_cpu_s"] = cpu["worker_cpu_s"]
    figures["tail_s"] = tail_s
    # Backend work thrown away: calls the simulator started and then saw the client leave (the pass's own, with the
    # tail of summaries it left; the server never has more calls in flight than the simulator's slots, so an
    # aborted call had started decoding).
    figures["backend"] = {
        key: backend_after[key] - backend_before[key] for key in ("attempts", "completed", "aborted", "dropped")
    }
    figures["cpu_ms_per_answer"] = cpu["cpu_ms_per_answer"]
    figures["load_average"] = [load_before, load_average()]
    if len(target.workers) > 1:
        figures["workers"] = target.per_worker(cpu_s=cpu["each_s"], cpu_share=cpu["share"], loop_lag_ms=lags)
    if plot is not None:
        write_svg(run, plot, title=f"{shape(len(target.workers))}, {transport}, {users} closed-loop users")
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


def idle_lag(target: Target, seconds: float, folder: Path) -> dict[str, Any]:
    lags = [probe.result(timeout=seconds + 30.0) for probe in target.probes(seconds, folder)]
    idle: dict[str, Any] = {"loop_lag_ms": worst_lag(lags), "load_average": load_average()}
    if len(target.workers) > 1:
        idle["workers"] = target.per_worker(loop_lag_ms=lags)
    return idle


def shape(workers: int) -> str:
    return "one worker" if workers == 1 else f"{workers} workers behind nginx"


def bench_env(args: argparse.Namespace, folder: Path, llm_base_url: str) -> dict[str, str]:
    """The workers' environment: the simulator as their LLM, no cache or rate limit in the way, and the database and
    Redis of `--database-url` / `--redis-url` (else SQLite in `folder` and no Redis)."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chatbot.settings",
        "DATA_DIR": str(folder),
        "LLM_BASE_URL": llm_base_url,
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
    if args.workers > 1:
        # Keys of this run's own: the workers share the LLM limit (`--server-limit`, the cluster's) through Redis,
        # and permits an earlier run's killed workers left behind must not count against it.
        env["REDIS_PREFIX"] = f"bench-streaming-{os.getpid()}"
    return env


def one_run(
    args: argparse.Namespace, target: Target, simulator: SimulatorProcess, folder: Path, repeat: int, transport: str
) -> dict[str, Any]:
    """A low-load pass through the server, the same answers' LLM calls replayed straight to the simulator, and a
    loaded pass; each starts on an idle simulator."""
    settled_s = settle(simulator)
    since = time.time()
    low = server_pass(target, transport, args.low_users, args.low_duration, folder, None, simulator)
    answers = answers_in_log([r for r in simulator.requests() if r["time"] >= since])
    settled_s += settle(simulator)
    direct_low = asyncio.run(direct_sdk(simulator.base_url, answers, args.low_users, args.low_duration))
    plot = OUT / f"streaming_load_{args.label}_{transport}.svg" if args.doc and repeat == 0 else None
    settled_s += settle(simulator)
    loaded = server_pass(target, transport, args.users, args.duration, folder, plot, simulator)
    run = {"repeat": repeat, "transport": transport, "low": low, "direct_low": direct_low, "loaded": loaded}
    run["settle_s"] = round(settled_s, 2)
    run["ttft_added_paired_ms"] = paired_ttft_added(low["ttft_each_ms"], direct_low["ttft_each_ms"])
    return run


def run_line(run: dict[str, Any]) -> str:
    """The run's headline figures on one line (with several workers: the lag the worst worker's, and each worker's
    share of the CPU)."""
    loaded = run["loaded"]
    shares = ""
    if "workers" in loaded:
        each = " / ".join(f"{worker['port']} {percent(worker['cpu_share'])}" for worker in loaded["workers"])
        shares = f"CPU share per worker {each}, "
    return (
        f"{run['transport']} run {run['repeat'] + 1}: {loaded['cpu_ms_per_answer']} ms CPU/answer, "
        f"{loaded['answers_per_s']} answers/s, lag p99 {loaded['loop_lag_ms']['p99']} ms"
        f"{' (worst worker)' if 'workers' in loaded else ''}, "
        f"TTFT added (paired) {run['ttft_added_paired_ms']} ms, {shares}"
        f"load {loaded['load_average']}"
    )


def percent(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.0f} %"


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
    result: dict[str, Any] = {"runs": []}
    target: Target | None = None
    try:
        env = bench_env(args, folder, simulator.base_url)
        prepare(env, static=False, quiet=True)  # as the cluster prepares its workers, without nginx's static files
        target = make_target(args, env, folder, taken)
        target.start()
        result["idle"] = idle_lag(target, 5.0, folder)
        for repeat in range(args.repeats):
            for transport in args.transports.split(","):
                run = one_run(args, target, simulator, folder, repeat, transport)
                result["runs"].append(run)
                print(run_line(run), flush=True)
    finally:
        if target is not None:
            target.stop()
        simulator.stop()
    if args.profile and target is not None:
        profiles = [str(worker.log_path.with_suffix(".prof")) for worker in target.workers]
        result["profile"] = profiles[0] if len(profiles) == 1 else profiles
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


def deployment(args: argparse.Namespace) -> str:
    """How the server under load was deployed, as the section's header says it (no password of a URL shown)."""
    if args.workers == 1:
        return "one daphne worker"
    return (
        f"{args.workers} daphne workers behind nginx on PostgreSQL `{redact(args.database_url)}` and Redis "
        f"`{redact(args.redis_url)}` (the load, the low-load pass included, goes through nginx, so the TTFT added "
        "counts the proxy's hop as a user sees it; CPU per answer is the sum over the workers' processes; each "
        "worker's loop lag is probed straight on its own port, and the worst worker's is shown)"
    )


def table_head(workers: int) -> list[str]:
    if workers == 1:
        return [
            "| transport | CPU ms / answer | answers/s | TTFT p50 / p95 ms | total p50 / p95 ms "
            "| loop lag p99 / max ms | TTFT added, low load (paired median; server vs SDK p50) ms "
            "| total added, low load ms | errors | load averages |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
    return [
        "| transport | CPU ms / answer (sum over workers) | CPU share per worker (port: median share) | answers/s "
        "| TTFT p50 / p95 ms | total p50 / p95 ms | loop lag p99 / max ms (worst worker) "
        "| TTFT added, low load, through nginx (paired median; server vs SDK p50) ms | total added, low load ms "
        "| errors | load averages |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]


def cpu_shares(runs: list[dict[str, Any]], transport: str) -> str:
    """Each worker's median share of the summed CPU over the transport's loaded passes, as `port: share`."""
    per_run = [r["loaded"]["workers"] for r in runs if r["transport"] == transport]
    shares = []
    for worker_runs in zip(*per_run, strict=True):
        median = statistics.median(float(worker["cpu_share"] or 0.0) for worker in worker_runs)
        shares.append(f"{worker_runs[0]['port']}: {percent(median)}")
    return " / ".join(shares)


def table_row(args: argparse.Namespace, result: dict[str, Any], transport: str) -> str:
    m = medians(result["runs"], transport)
    loads = ", ".join(str(r["loaded"]["load_average"][0]) for r in result["runs"] if r["transport"] == transport)
    shares = f" {cpu_shares(result['runs'], transport)} |" if args.workers > 1 else ""
    return (
        f"| {transport} | {m['cpu_ms_per_answer']:.1f} |{shares} {m['answers_per_s']:.2f} | "
        f"{m['ttft_p50']:.0f} / {m['ttft_p95']:.0f} | {m['total_p50']:.0f} / {m['total_p95']:.0f} | "
        f"{m['lag_p99']:.0f} / {m['lag_max']:.0f} | {m['ttft_added']:+.1f} "
        f"({m['low_ttft']:.1f} vs {m['direct_ttft']:.1f}) | {m['low_total'] - m['direct_total']:+.1f} | "
        f"{m['errors']} | {loads} |"
    )


def section(args: argparse.Namespace, result: dict[str, Any], command: str) -> str:
    idle = result["idle"]
    worst = " (worst worker)" if args.workers > 1 else ""
    lines = [
        f"<!-- section:{args.label} -->",
        f"## {args.label}",
        "",
        f"Command: `{command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). Machine: "
        f"{platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}. Simulator "
        f"`--max-num-seqs {args.max_num_seqs} --ttft-ms {args.ttft_ms:g} --tpot-ms {args.tpot_ms:g} "
        f"--output-tokens {args.output_tokens}`, server limit {args.server_limit}, {deployment(args)}, "
        f"{args.users} closed-loop clients for {args.duration:g} s (low load: {args.low_users} for "
        f"{args.low_duration:g} s), medians over {args.repeats} run(s). Idle loop lag{worst} p99 / max "
        f"{idle['loop_lag_ms']['p99']} / {idle['loop_lag_ms']['max']} ms (load average {idle['load_average']}).",
        "",
        *table_head(args.workers),
    ]
    lines += [table_row(args, result, transport) for transport in args.transports.split(",")]
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
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
    parser.add_argument("--workers", type=int, default=1, help="daphne workers; 2 or more run behind nginx")
    parser.add_argument("--database-url", default="", help="default: SQLite in a temporary DATA_DIR")
    parser.add_argument("--redis-url", default="", help="default: none (one worker needs no Redis)")
    parser.add_argument("--label", default="run")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--doc", action="store_true", help=f"write the section into {DOC.relative_to(ROOT)}")
    parser.add_argument("--profile", action="store_true", help="run the worker under cProfile (CHATBOT_CPROFILE)")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    parser.add_argument("--probe-seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    parser.add_argument("--probe-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    problem = workers_problem(args.workers, args.database_url, args.redis_url)
    if problem:
        parser.error(problem)
    return args


def workers_problem(workers: int, database_url: str, redis_url: str) -> str:
    """Why the workers cannot run on this database and Redis ("" when they can): several workers share one
    PostgreSQL database (each would have its own SQLite file in a temporary folder) and one Redis (the LLM limit,
    the channel layer, resumable streams)."""
    if workers < 1:
        return f"--workers must be at least 1 (got {workers})"
    if workers == 1:
        return ""
    missing = []
    if not database_url.startswith(("postgres://", "postgresql://")):
        missing.append("a PostgreSQL --database-url (postgres://...)")
    if not redis_url:
        missing.append("a --redis-url")
    return f"--workers {workers} needs " + " and ".join(missing) if missing else ""


def main() -> int:
    args = parse_args()
    if args.probe:
        args.probe_out.write_text(json.dumps(asyncio.run(probe(args.probe, args.probe_seconds))))
        return 0
    command = redact(" ".join(["python scripts/bench_streaming_load.py", *sys.argv[1:]]))
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
