"""What an idle chat WebSocket costs one daphne worker, and whether closing it gives the memory back.

    python scripts/bench_idle_sockets.py --sockets 1000 --cycles 3

Starts one worker on its embedded defaults (SQLite in a temporary DATA_DIR, no LLM needed: nothing is asked), then
per cycle opens `--sockets` WebSockets to /ws/chat/ (each through the worker's whole accept path: origin check,
session, the consumer), holds them idle for `--hold` seconds, closes them all and waits `--settle` seconds. The
worker's resident memory (VmRSS from /proc) is read before the first cycle, with the sockets open and after each
close. Per socket = (open - before) / sockets; "returned" compares the memory after each close: a worker that
keeps something per closed socket grows from one cycle to the next, one that reuses its memory stays level.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devtools.simulator.testing import free_port  # noqa: E402
from scripts.cluster import WorkerProcess, prepare  # noqa: E402


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


async def hold_sockets(url: str, count: int, hold: float) -> list[Any]:
    import websockets

    origin = url.replace("ws://", "http://").split("/ws/", 1)[0]
    sockets: list[Any] = []
    for start in range(0, count, 50):  # fifty at a time: the accept path, not the listen backlog, is measured
        batch = [websockets.connect(url, origin=origin, open_timeout=30, ping_interval=None) for _ in range(50)]  # type: ignore[arg-type]
        sockets += await asyncio.gather(*batch[: count - start])
    await asyncio.sleep(hold)
    return sockets


async def close_all(sockets: list[Any]) -> None:
    await asyncio.gather(*(sock.close() for sock in sockets))


def run(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="bench-idle-"))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chatbot.settings",
        "DATA_DIR": str(folder),
        "DATABASE_URL": "",
        "REDIS_URL": "",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    prepare(env, static=False, quiet=True)  # the worker's database migrated and its index built
    worker = WorkerProcess(args.port or free_port(), env, folder)
    worker.start()
    try:
        worker.wait_ready()
        assert worker.process is not None
        pid = worker.process.pid
        url = worker.url.replace("http://", "ws://") + "/ws/chat/"

        async def measure() -> tuple[int, list[dict[str, int]]]:
            # One socket first, so what every worker pays once (the consumer's imports, the first session) is not
            # counted per socket.
            await close_all(await hold_sockets(url, 1, 0.1))
            await asyncio.sleep(args.settle)
            before = rss_kb(pid)
            cycles = []
            for _ in range(args.cycles):
                sockets = await hold_sockets(url, args.sockets, args.hold)
                opened = rss_kb(pid)
                await close_all(sockets)
                await asyncio.sleep(args.settle)
                closed = rss_kb(pid)
                cycles.append({"open_kb": opened, "after_close_kb": closed})
                print(f"open: {opened / 1024:.1f} MB, after close: {closed / 1024:.1f} MB", flush=True)
            return before, cycles

        before, cycles = asyncio.run(measure())
        return {
            "sockets": args.sockets,
            "before_kb": before,
            "cycles": cycles,
            "per_socket_kb": round((cycles[0]["open_kb"] - before) / args.sockets, 1),
            "kept_after_first_close_kb": cycles[0]["after_close_kb"] - before,
            "growth_over_later_cycles_kb": cycles[-1]["after_close_kb"] - cycles[0]["after_close_kb"],
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        }
    finally:
        worker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sockets", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--hold", type=float, default=2.0)
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(run(args), indent=1))


if __name__ == "__main__":
    main()
