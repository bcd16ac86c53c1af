"""One worker against two behind nginx, same LLM simulator, same load: what a second worker buys.

    python scripts/bench_cluster_loadtest.py --duration 60 --repeats 3

For each shape (1 worker, 2 workers) and each repeat: start the workers behind Debian's nginx
(`scripts/cluster.py`) on this machine's PostgreSQL and Redis, run `manage.py loadtest` against nginx (closed loop,
distinct questions, the simulator's /metrics sampled), stop them. The simulator runs `--max-num-seqs` sequences;
the cluster's LLM limit is set once to it (every worker draws its permits from Redis). Writes
docs/benchmarks/loadtest.md with medians over the repeats, the load average beside each run, the machine, and one
plot per shape.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devtools.simulator.testing import SimulatorProcess  # noqa: E402
from scripts.cluster import Cluster, free_port  # noqa: E402

OUT = ROOT / "docs" / "benchmarks"


SCENARIOS = {
    # name: (simulator --max-num-seqs, --tpot-ms, users): what limits the answers per second
    "llm-bound": (8, 20.0, 32),
    "worker-bound": (64, 1.0, 64),
}


def one_run(
    workers: int, args: argparse.Namespace, simulator: SimulatorProcess, repeat: int, scenario: str
) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix=f"bench-cluster-{workers}-"))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chatbot.settings",
        "DATA_DIR": str(folder),
        "DATABASE_URL": f"{args.postgres}/bench_cluster_{workers}_{repeat}_{os.getpid()}",
        "REDIS_URL": args.redis,
        "REDIS_PREFIX": f"bench-cluster-{workers}-{repeat}-{os.getpid()}",
        "LLM_BASE_URL": simulator.base_url,
        # The cluster's limit, set once: with REDIS_URL every worker draws its permits from it in Redis.
        "LLM_MAX_CONCURRENT_CHAT": str(args.max_num_seqs),
        "LLM_MAX_CONCURRENT_DEFAULT": str(args.max_num_seqs),
        "LLM_MAX_WAITERS": "1000",
        "RAG_SEMANTIC_CACHE_ENABLED": "false",
        "RAG_RATE_LIMIT_PER_MINUTE": "0",
        "PYTHONUNBUFFERED": "1",
    }
    cluster = Cluster(workers=workers, port=free_port(), env=env, folder=folder / "cluster")
    cluster.prepare()
    cluster.start()
    try:
        load_before = os.getloadavg()[0]
        result_path = folder / "result.json"
        plot = OUT / f"loadtest_{scenario}_{workers}w.svg"
        command = [
            sys.executable, str(ROOT / "manage.py"), "loadtest", cluster.url, "--users", str(args.users),
            "--duration", str(args.duration), "--metrics-url", simulator.root_url + "/metrics",
            "--llm-capacity", str(args.max_num_seqs), "--json", str(result_path),
            "--plot", str(plot), "--title", f"{workers} worker(s) behind nginx, {args.users} users",
        ]  # fmt: skip
        subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        result: dict[str, Any] = json.loads(result_path.read_text())
        result["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        return result
    finally:
        cluster.stop()
        drop = f'DROP DATABASE IF EXISTS "{env["DATABASE_URL"].rsplit("/", 1)[1]}" WITH (FORCE)'
        subprocess.run(["psql", args.postgres + "/postgres", "-qc", drop], check=False)


def row(label: str, runs: list[dict[str, Any]]) -> str:
    def med(key: str, sub: str | None = None) -> float:
        values = [r[key][sub] if sub else r[key] for r in runs]
        return float(statistics.median(values))

    errors = sum(sum(r["errors"].values()) for r in runs)
    util = statistics.median(r["llm_server"]["utilisation"] for r in runs)
    waiting = max(r["llm_server"]["waiting_max"] for r in runs)
    loads = ", ".join(f"{r['load_average'][0]:.1f}" for r in runs)
    return (
        f"| {label} | {med('answers_per_s'):.2f} | {med('ttft_ms', 'p50'):.0f} | {med('ttft_ms', 'p95'):.0f} | "
        f"{med('total_ms', 'p50'):.0f} | {med('total_ms', 'p95'):.0f} | {med('total_ms', 'p99'):.0f} | "
        f"{util:.2f} | {waiting:g} | {errors} | {loads} |"
    )


def scenario_section(name: str, args: argparse.Namespace, runs: dict[int, list[dict[str, Any]]]) -> list[str]:
    ratio = statistics.median(r["answers_per_s"] for r in runs[2]) / statistics.median(
        r["answers_per_s"] for r in runs[1]
    )
    return [
        f"## {name}: simulator `--max-num-seqs {args.max_num_seqs} --tpot-ms {args.tpot_ms:g}`, {args.users} users",
        "",
        "| shape | answers/s | TTFT p50 ms | TTFT p95 ms | total p50 ms | total p95 ms | total p99 ms | "
        "LLM utilisation | LLM waiting max | errors | load averages |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        row("1 worker", runs[1]),
        row("2 workers", runs[2]),
        "",
        f"Two workers against one: {ratio:.2f}x the answers per second.",
        "",
        f"![1 worker](loadtest_{name}_1w.svg)",
        f"![2 workers](loadtest_{name}_2w.svg)",
        "",
    ]


def run_scenario(name: str, args: argparse.Namespace) -> dict[int, list[dict[str, Any]]]:
    simulator = SimulatorProcess().start(
        max_num_seqs=args.max_num_seqs, tpot_ms=args.tpot_ms, ttft_ms=50, output_tokens=args.output_tokens
    )
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    try:
        for repeat in range(args.repeats):
            for workers in (1, 2):  # side by side: the shapes alternate, so drift in the machine hits both
                result = one_run(workers, args, simulator, repeat, name)
                runs[workers].append(result)
                print(
                    f"{name}, {workers} worker(s), run {repeat + 1}: {result['answers_per_s']} answers/s, "
                    f"total p50 {result['total_ms']['p50']} ms, load {result['load_average']}",
                    flush=True,
                )
    finally:
        simulator.stop()
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="llm-bound,worker-bound", help=f"of {', '.join(SCENARIOS)}")
    parser.add_argument("--users", type=int, default=0, help="override the scenario's users")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output-tokens", type=int, default=100)
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()

    command = " ".join(["python scripts/bench_cluster_loadtest.py", *sys.argv[1:]])
    lines = [
        "# Load test: one worker against two behind nginx",
        "",
        f"Command: `{command}`. Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}. Workers behind Debian's nginx "
        "(`scripts/cluster.py`), PostgreSQL, Redis and the LLM simulator on the same machine; each worker's LLM "
        "limit is the cluster's, set once to the simulator's `--max-num-seqs` (permits drawn from Redis). "
        f"`manage.py loadtest`: closed loop, distinct questions (no cache hits), {args.duration:g} s per run, "
        f"simulator `--output-tokens {args.output_tokens} --ttft-ms 50`. Medians over {args.repeats} runs, the "
        "two shapes alternating; the load average (1 min) at the start of each run is listed.",
        "",
    ]
    raw: dict[str, Any] = {}
    for name in args.scenarios.split(","):
        args.max_num_seqs, args.tpot_ms, users = SCENARIOS[name]
        args.users = args.users or users
        runs = run_scenario(name, args)
        raw[name] = runs
        lines += scenario_section(name, args, runs)
        args.users = 0 if "--users" not in sys.argv else args.users
    lines += [
        "## Reading it",
        "",
        "- **LLM-bound** (LLM utilisation near 1): the LLM server's sequences are the bottleneck; a second worker "
        "adds nothing, and the wait shows as time to first token queued in our manager (where priority and `busy` "
        "apply), not inside the LLM server (its waiting queue stays at 0 because the workers' limits add up to its "
        "`--max-num-seqs`). More answers per second need more LLM capacity.",
        "- **Worker-bound** (LLM utilisation low, the workers' CPU saturated): a second worker process on the "
        "second core adds throughput; on this 2-core machine it shares the cores with nginx, PostgreSQL, Redis "
        "and the simulator.",
        "- To size a deployment: point `manage.py loadtest` at one worker with the real LLM server's `/metrics`, "
        "raise `--users` until answers/s stop growing, and read which of the two it is; add workers while the "
        "workers' CPU is the limit, LLM replicas while the LLM's utilisation is.",
        "",
        "Raw results (JSON, one per run):",
        "",
        "```json",
        json.dumps(raw, indent=1)[:40000],
        "```",
    ]
    (OUT / "loadtest.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print((OUT / "loadtest.md").read_text().split("Raw results")[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
