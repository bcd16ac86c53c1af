"""Two real daphne workers, one LLM simulator of 4 sequences, one limit of 4 set once for the cluster (Redis).

What the LLM server sees is sampled from its /metrics every 100 ms: the calls it runs and the calls waiting inside
it, where our priority and busy logic could not see them.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import pytest
import redis

from concurrency.cluster.permits import token_worker
from devtools.simulator.testing import SimulatorProcess
from infra import identity
from tests import daphne_workers
from tests.concurrency.cluster_redis import suite_redis_url
from tests.daphne_workers import Worker, running_workers
from tests.llm_simulator import simulator_view
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

CAPACITY = 4
QUESTIONS = [
    "How do I reset my password?",
    "如何重設密碼？",
    "How do I download my course certificate?",
    "如何下載課程證書？",
    "How do I change my email address?",
    "如何修改電子郵件地址？",
    "How do I enrol in a course?",
    "如何報名課程？",
]


@dataclass
class Sampler:
    """The simulator's running and waiting gauges, every 100 ms on a thread, while the block runs."""

    sim: SimulatorProcess
    samples: list[tuple[float, float, float]] = field(default_factory=list)  # (monotonic, running, waiting)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            text = self.sim.metrics()
            running = waiting = 0.0
            for line in text.splitlines():
                if line.startswith("vllm:num_requests_running"):
                    running += float(line.rpartition(" ")[2])
                elif line.startswith("vllm:num_requests_waiting"):
                    waiting += float(line.rpartition(" ")[2])
            self.samples.append((time.monotonic(), running, waiting))
            self._stop.wait(0.1)

    @property
    def max_running(self) -> float:
        return max((s[1] for s in self.samples), default=0.0)

    @property
    def max_waiting(self) -> float:
        return max((s[2] for s in self.samples), default=0.0)

    def first_at_least(self, running: float, after: float) -> float | None:
        return next((t for t, r, _ in self.samples if t >= after and r >= running), None)


def ask(worker: Worker, question: str) -> str:
    """One SSE answer, without a cookie: the channel of its terminal event ("meta_summary" or "error"), or
    "no terminal" when the stream broke off without one."""
    events = []
    try:
        with httpx.stream(
            "POST", worker.url + "/api/v1/rag/ask/stream_chat", json={"question": question}, timeout=60.0
        ) as response:
            assert response.status_code == 200, response.read()
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
    except httpx.ReadTimeout:
        return "no terminal"
    return str(events[-1]["channel"]) if events else "no terminal"


def check_answers(outcomes: list[str]) -> None:
    """Every ask answered. A permit that never came would end its stream with `error` `busy` (the acquire timeout,
    30 s, is shorter than the client's read timeout)."""
    assert outcomes == ["meta_summary"] * len(outcomes), outcomes


def ask_all(pool: ThreadPoolExecutor, targets: Sequence[Worker]) -> list[Future[str]]:
    return [pool.submit(ask, worker, f"{QUESTIONS[i % len(QUESTIONS)]} ({i})") for i, worker in enumerate(targets)]


@pytest.fixture(scope="module")
def sim(suite_simulator: SimulatorProcess) -> SimulatorProcess:
    # About a second per call, so every wave of four is seen by a 100 ms sampler
    flags = {"max_num_seqs": CAPACITY, "ttft_ms": 100, "tpot_ms": 30, "output_tokens": 30}
    return simulator_view(suite_simulator, flags)


@pytest.fixture(scope="module")
def worker_env(sim: SimulatorProcess) -> Iterator[dict[str, str]]:
    url = suite_redis_url()
    with daphne_workers.worker_env(
        "cluster-workers",
        llm_base_url=sim.base_url,
        redis_url=url,
        LLM_MAX_CONCURRENT_DEFAULT=str(CAPACITY),  # set once, for the whole cluster
        LLM_ACQUIRE_TIMEOUT="30",
        RAG_SEMANTIC_CACHE_ENABLED="false",
    ) as env:
        yield env


@pytest.fixture(scope="module")
def workers(worker_env: dict[str, str]) -> Iterator[tuple[Worker, ...]]:
    with running_workers([worker_env, worker_env]) as started:
        yield started


def served(futures: Sequence[Future[str]]) -> list[str]:
    return [f.result(timeout=180) for f in futures]


def test_one_worker_alone_uses_the_whole_capacity(workers: tuple[Worker, ...], sim: SimulatorProcess) -> None:
    a, _ = workers
    with ThreadPoolExecutor(16) as pool, Sampler(sim) as sampler:
        outcomes = served(ask_all(pool, [a] * 16))
    print(f"\none worker, 16 asks: max running {sampler.max_running}, max waiting {sampler.max_waiting}")
    check_answers(outcomes)
    assert sampler.max_running == CAPACITY
    assert sampler.max_waiting == 0


def test_two_workers_together_never_exceed_the_capacity(workers: tuple[Worker, ...], sim: SimulatorProcess) -> None:
    a, b = workers
    with ThreadPoolExecutor(16) as pool, Sampler(sim) as sampler:
        outcomes = served(ask_all(pool, [a, b] * 8))
    print(f"\ntwo workers, 16 asks: max running {sampler.max_running}, max waiting {sampler.max_waiting}")
    check_answers(outcomes)
    assert sampler.max_running == CAPACITY
    assert sampler.max_waiting == 0


def queued_on(worker: Worker, env: dict[str, str]) -> int:
    """The worker's LLM calls waiting in Redis for a cluster permit (their tokens start with its worker id)."""
    client = redis.Redis.from_url(suite_redis_url(), decode_responses=True)
    try:
        worker_id = identity.worker_id(worker.process.pid)
        keys = client.scan_iter(f"{env['REDIS_PREFIX']}:llm:*:queue")
        return sum(token_worker(str(token)) == worker_id for key in keys for token in client.zrange(key, 0, -1))
    finally:
        client.close()


def test_a_killed_workers_permits_come_back_within_ten_seconds(
    workers: tuple[Worker, ...], worker_env: dict[str, str], sim: SimulatorProcess
) -> None:
    """Last in this module: it kills one of the two workers."""
    a, b = workers
    with ThreadPoolExecutor(16) as pool, Sampler(sim) as sampler:
        on_b = ask_all(pool, [b] * 8)
        wait_for(lambda: sampler.max_running, lambda running: running >= CAPACITY, within=30.0, interval=0.05)
        assert sampler.max_running == CAPACITY  # b holds every permit
        on_a = ask_all(pool, [a] * 8)
        # a's calls are queued in Redis behind b's: enough of them to take every permit b's leases give back
        wait_for(lambda: queued_on(a, worker_env), lambda queued: queued >= CAPACITY, within=30.0, interval=0.05)
        b.process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        outcomes = served(on_a)
        back_at = sampler.first_at_least(CAPACITY, after=killed_at + 0.2)
    for future in on_b:  # killed mid-answer: no terminal event
        with contextlib.suppress(httpx.TransportError):
            assert future.result(timeout=30) == "no terminal"
    check_answers(outcomes)
    assert back_at is not None
    print(f"\nSIGKILL: the other worker ran {CAPACITY} calls again {back_at - killed_at:.1f} s later")
    assert back_at - killed_at < 10.0
    assert sampler.max_waiting == 0
