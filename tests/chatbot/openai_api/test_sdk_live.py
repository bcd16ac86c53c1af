"""The official `openai` SDK, sync and async, streaming and not, against two real daphne workers answering through
the LLM simulator: what any OpenAI client sees, keys included.

The workers are the suite's shared pair (`tests.ask_workers`: one database, and Redis when the suite runs with
`REDIS_URL`). The busy-server test gives them one chat slot and no wait queue through the live settings, so a
second question while one answer holds the slot is refused at once.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

import httpx
import openai
import pytest

from devtools.simulator.testing import SimulatorProcess
from tests.ask_workers import AskWorkers
from tests.daphne_workers import Worker
from tests.llm_simulator import simulator_view
from tests.waiting import until_async

pytestmark = pytest.mark.slow

QUESTION = "How do I reset my password?"
STATUS = "/api/v1/admin/concurrency/status"


@dataclass
class Deployment:
    shared: AskWorkers
    key: str  # chat and admin-read

    @property
    def workers(self) -> tuple[Worker, ...]:
        return self.shared.workers

    @property
    def sim(self) -> SimulatorProcess:
        return self.shared.simulator

    def client(self, worker: int = 0, *, key: str | None = None) -> openai.OpenAI:
        # max_retries=0: a test sees each refusal itself instead of the SDK retrying it away.
        return openai.OpenAI(
            base_url=self.workers[worker].url + "/v1", api_key=self.key if key is None else key, max_retries=0
        )

    def async_client(self, worker: int = 0) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.workers[worker].url + "/v1", api_key=self.key, max_retries=0)

    def new_key(self, *flags: str) -> str:
        return self.shared.new_key(*flags)

    def chat_in_progress(self, worker: int = 0) -> int:
        headers = {"Authorization": f"Bearer {self.key}"}
        body = self.workers[worker].http.get(STATUS, headers=headers).json()
        return int(body["chat"]["in_progress"])  # the seed's shape, summed over the workers


@pytest.fixture(scope="module")
def deployment(ask_workers: AskWorkers) -> Deployment:
    flags = {"ttft_ms": 5, "tpot_ms": 2, "output_tokens": 40, "reasoning_tokens": 4, "max_num_seqs": 8}
    simulator_view(ask_workers.simulator, flags)  # for the module: its tests keep the counters and faults
    key = ask_workers.new_key("--scopes", "chat,admin-read", "--rate-limit", "0")
    return Deployment(shared=ask_workers, key=key)


def test_models_lists_each_backend(deployment: Deployment) -> None:
    models = deployment.client().models.list()
    assert [m.id for m in models.data] == ["chat", "responses"]
    assert deployment.client().models.retrieve("responses").id == "responses"


def test_sync_sdk_gets_a_cited_answer_with_usage_and_sources(deployment: Deployment) -> None:
    completion = deployment.client().chat.completions.create(
        model="chat", messages=[{"role": "user", "content": QUESTION}]
    )

    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop"
    assert "[1]" in (message.content or "")
    assert (message.model_extra or {}).get("reasoning_content"), "the simulator reasons before it answers"
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    extra = completion.model_extra or {}
    assert extra["search_results"][0]["ref"] == 1
    assert extra["citations"] == [source["url"] for source in extra["search_results"]]


def test_sync_sdk_streams_the_answer_with_sources_on_the_final_chunk_and_usage_last(deployment: Deployment) -> None:
    stream = deployment.client(1).chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": QUESTION}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content", "") for c in chunks if c.choices
    )
    assert "[1]" in text and reasoning
    final = next(c for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
    refs = [source["ref"] for source in (final.model_extra or {})["search_results"]]
    assert refs and all(f"[{ref}]" in text for ref in refs)
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0


async def test_async_sdk_streaming_and_not(deployment: Deployment) -> None:
    client = deployment.async_client()
    completion = await client.chat.completions.create(model="chat", messages=[{"role": "user", "content": QUESTION}])
    assert "[1]" in (completion.choices[0].message.content or "")
    assert completion.usage is not None and completion.usage.total_tokens > 0

    stream = await client.chat.completions.create(
        model="responses", messages=[{"role": "user", "content": QUESTION}], stream=True
    )
    text = ""
    finals = []
    async for chunk in stream:
        text += chunk.choices[0].delta.content or ""
        if chunk.choices[0].finish_reason:
            finals.append(chunk)
    assert "[1]" in text and len(finals) == 1 and (finals[0].model_extra or {})["citations"]
    await client.close()


def test_without_a_key_or_with_a_wrong_one_the_sdk_raises_authentication_error(deployment: Deployment) -> None:
    question = [{"role": "user", "content": QUESTION}]
    # The SDK insists on a key of its own: `omit` takes the header out of the request it sends.
    without = {"Authorization": openai.omit}
    for client, headers, code in (
        (deployment.client(), without, "missing_api_key"),
        (deployment.client(key="hc-wrong-key"), {}, "invalid_api_key"),
    ):
        with pytest.raises(openai.AuthenticationError) as raised:
            client.chat.completions.create(model="chat", messages=question, extra_headers=headers)  # type: ignore[arg-type]
        assert raised.value.status_code == 401
        assert raised.value.code == code


async def test_a_busy_server_raises_rate_limit_error_with_retry_after_and_a_disconnect_frees_the_slot(
    deployment: Deployment,
) -> None:
    await deployment.sim.afaults(fail_next=["ok", "stall:8:30"])  # the plan, then an answer that stalls
    with deployment.shared.settings(limits={"chat": 1}, max_waiters=0):  # one chat slot, no queue
        await held_slot_refuses_the_next_question(deployment)


async def held_slot_refuses_the_next_question(deployment: Deployment) -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": QUESTION}], "stream": True}
    headers = {"Authorization": f"Bearer {deployment.key}"}
    client = deployment.async_client()
    async with httpx.AsyncClient(base_url=deployment.workers[0].url, timeout=30) as http:
        async with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as holder:
            assert holder.status_code == 200
            lines = holder.aiter_lines()
            while '"content":"' not in (await anext(lines)).replace('"content":""', ""):
                pass  # until the answer streams: it holds the worker's one chat slot
            assert await asyncio.to_thread(deployment.chat_in_progress) == 1

            with pytest.raises(openai.RateLimitError) as raised:
                await client.chat.completions.create(model="chat", messages=[{"role": "user", "content": QUESTION}])
            assert raised.value.code == "busy"
            assert int(raised.value.response.headers["retry-after"]) >= 1
        # leaving the block closed the connection mid-answer
        await until_async(
            lambda: asyncio.to_thread(deployment.chat_in_progress),
            lambda in_progress: in_progress == 0,
            within=1.0,
            note="the slot must be free within a second of the disconnect",
        )
    await client.close()


def test_a_key_past_its_rate_limit_raises_rate_limit_error(deployment: Deployment) -> None:
    key = deployment.new_key("--rate-limit", "1")
    client = deployment.client(key=key)
    client.chat.completions.create(model="chat", messages=[{"role": "user", "content": QUESTION}])
    with pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="chat", messages=[{"role": "user", "content": QUESTION}])
    assert raised.value.code == "rate_limit_exceeded"
    assert 1 <= int(raised.value.response.headers["retry-after"]) <= 60


def test_a_revoked_key_stops_at_once_on_every_worker_and_its_usage_was_counted(deployment: Deployment) -> None:
    key = deployment.new_key()
    prefix = key[:11]
    for worker in (0, 1):
        deployment.client(worker, key=key).chat.completions.create(
            model="chat", messages=[{"role": "user", "content": QUESTION}]
        )
    row = next(line for line in deployment.shared.manage("apikey", "list").splitlines() if line.startswith(prefix))
    counters = re.search(r"(\d+)\s+(\d+)\s+active", row)
    assert counters, row
    requests, tokens = int(counters[1]), int(counters[2])
    assert requests == 2 and tokens > 0

    deployment.shared.manage("apikey", "revoke", prefix)
    for worker in (0, 1):
        with pytest.raises(openai.AuthenticationError) as raised:
            deployment.client(worker, key=key).models.list()
        assert "revoked" in raised.value.message
