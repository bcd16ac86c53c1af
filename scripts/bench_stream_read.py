"""The client's CPU to read one streamed answer from an OpenAI-compatible server: the floor under a worker's cost
per answer, whatever the pipeline does around it.

    python scripts/bench_stream_read.py --tokens 100 --streams 20 --repeats 5

Starts the LLM simulator (`--tpot-ms 2`, so each token arrives as an SSE event of its own, as vLLM sends them), then
reads `--streams` chat completion streams one after another, three ways, and prints the median CPU time
(`time.process_time()`, this process only) per stream, median of `--repeats` rounds that interleave the three:

- `sdk`: the openai SDK's own stream (`chat.completions.create(stream=True)`, a pydantic chunk per event);
- `raw`: the worker's path (`RawEventStream`: the SDK's low-level post, events decoded to dicts, `ChatStreamParser`);
- `http only`: the same request through the SDK's HTTP client, reading the body and nothing else (no SSE parsing,
  no JSON): what the HTTP stack alone costs.

The client is the workers' (`rag.llm.client.make_client`) on the HTTP stack `--http-client` names: LLM_HTTP_CLIENT's
value by default, or `both` to measure httpx and aiohttp in the same interleaved rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbot.settings")

import httpx2  # noqa: E402
from django.conf import settings  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from devtools.simulator.testing import SimulatorProcess  # noqa: E402
from rag.llm.client import ClientKey, make_client  # noqa: E402
from rag.llm.config import HTTP_CLIENTS, HttpClient  # noqa: E402
from rag.llm.streams import ChatStreamParser, RawEventStream  # noqa: E402

MESSAGES = [{"role": "user", "content": "How do I download my certificate?"}]


async def read_sdk(client: AsyncOpenAI) -> int:
    stream = await client.chat.completions.create(model="sim", messages=MESSAGES, stream=True)  # type: ignore[arg-type]
    deltas = 0
    async for chunk in stream:  # type: ignore[union-attr]
        deltas += bool(chunk.choices and chunk.choices[0].delta.content)
    return deltas


async def read_raw(client: AsyncOpenAI) -> int:
    body = {"model": "sim", "messages": MESSAGES, "stream": True}
    stream = await RawEventStream.open(client, "/chat/completions", body)
    parser = ChatStreamParser()
    deltas = 0
    try:
        async for event in stream:
            deltas += sum(1 for delta in parser.feed(event) if delta.text)
    finally:
        await stream.close()
    return deltas


async def read_http(client: AsyncOpenAI) -> int:
    body = {"model": "sim", "messages": MESSAGES, "stream": True}
    response = await client.post("/chat/completions", cast_to=httpx2.Response, body=body, stream=True)
    chunks = 0
    try:
        async for _chunk in response.aiter_raw():
            chunks += 1
    finally:
        await response.aclose()
    return chunks


async def measure(base_url: str, streams: int, repeats: int, http_clients: list[HttpClient]) -> dict[str, Any]:
    # The SDK's default timeouts (600 s, connect 5 s), on the client the workers build.
    clients = {name: make_client(ClientKey(base_url, "x", 5.0, 600.0, name)) for name in http_clients}
    reads = {"sdk": read_sdk, "raw": read_raw, "http only": read_http}
    ways = {
        (f"{read} ({name})" if len(clients) > 1 else read): (client, way)
        for read, way in reads.items()
        for name, client in clients.items()
    }
    rounds: dict[str, list[float]] = {name: [] for name in ways}
    counts: dict[str, int] = {}
    for name, (client, way) in ways.items():  # warm-up: imports, the connection pool, the SDK's model classes
        counts[name] = await way(client)
    for _ in range(repeats):
        for name, (client, way) in ways.items():
            spent = []
            for _ in range(streams):
                started = time.process_time()
                await way(client)
                spent.append(time.process_time() - started)
            rounds[name].append(statistics.median(spent) * 1000)
    for client in clients.values():
        await client.close()
    return {
        name: {"ms_cpu_per_stream": round(statistics.median(values), 2), "rounds": [round(v, 2) for v in values]}
        | {"events_or_chunks": counts[name]}
        for name, values in rounds.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--http-client",
        choices=[*HTTP_CLIENTS, "both"],
        default=settings.LLM_HTTP_CLIENT,
        help="the clients' HTTP stack (default: LLM_HTTP_CLIENT, %(default)s); both: each, in the same rounds",
    )
    args = parser.parse_args()
    http_clients: list[HttpClient] = list(HTTP_CLIENTS) if args.http_client == "both" else [args.http_client]
    simulator = SimulatorProcess().start(ttft_ms=0, tpot_ms=2, output_tokens=args.tokens, max_num_seqs=4)
    try:
        load = os.getloadavg()[0]
        figures = asyncio.run(measure(simulator.base_url, args.streams, args.repeats, http_clients))
    finally:
        simulator.stop()
    print(f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, load average {load:.2f}")
    for name, row in figures.items():
        per_event = row["ms_cpu_per_stream"] * 1000 / args.tokens
        print(
            f"{name:20s} {row['ms_cpu_per_stream']:7.2f} ms CPU per {args.tokens}-token stream "
            f"({per_event:.0f} us per token; rounds {row['rounds']})"
        )


if __name__ == "__main__":
    main()
