"""Real OpenAI clients against a real daphne worker (the suite's shared pair, `tests.ask_workers`: answers through
the LLM simulator, `PUBLIC_BASE_URL` set): Open WebUI's recorded request bodies replayed over HTTP, LangChain's
`ChatOpenAI` and LiteLLM's `completion(api_base=...)`.

The `openai` SDK's own tests are `test_sdk_live.py`; these are the clients people build on it. What the offline
rules make of the same bodies (More Concise keeping the sentence that answered) is `test_client_tasks.py`'s.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.simulator.testing import SimulatorProcess
from tests.ask_workers import PUBLIC_BASE_URL, AskWorkers
from tests.daphne_workers import Worker, manage
from tests.llm_simulator import simulator_view

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parent / "fixtures" / "open_webui"
PUBLIC = PUBLIC_BASE_URL
QUESTION = "How do I reset my password?"

# LiteLLM reads its model price list from the network at import unless told to use its own copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@dataclass
class Deployment:
    worker: Worker
    env: dict[str, str]
    key: str

    @property
    def base_url(self) -> str:
        return self.worker.url + "/v1"

    def post(self, body: dict[str, Any], *, key: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key or self.key}"}
        return self.worker.http.post("/v1/chat/completions", json=body, headers=headers, timeout=60)

    def conversations(self) -> int:
        code = "from chatbot.models import Conversation; print(Conversation.objects.count())"
        return int(manage(self.env, "shell", "-c", code).strip().splitlines()[-1])


@pytest.fixture(scope="module")
def deployment(ask_workers: AskWorkers) -> Deployment:
    return Deployment(worker=ask_workers.workers[0], env=ask_workers.env, key=ask_workers.new_key("--rate-limit", "0"))


@pytest.fixture(autouse=True)
def simulator(ask_workers: AskWorkers) -> SimulatorProcess:
    """The simulator answering quickly, citing its sources."""
    return simulator_view(ask_workers.simulator, {"ttft_ms": 5, "tpot_ms": 1, "output_tokens": 40})


def fixture(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return body


def streamed(response: httpx.Response) -> tuple[str, list[dict[str, Any]]]:
    assert response.status_code == 200, response.text[:300]
    chunks = [json.loads(line[6:]) for line in response.text.split("\n\n") if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    return text, chunks


def test_open_webui_requests_replayed_over_http(deployment: Deployment) -> None:
    before = deployment.conversations()

    text, chunks = streamed(deployment.post(fixture("chat_with_tools.json")))
    zh_text, zh_chunks = streamed(deployment.post(fixture("chat_zh_with_tools.json")))
    titles = [deployment.post(fixture(name)).json() for name in ("title.json", "tags.json", "follow_ups.json")]
    regenerate = fixture("regenerate_more_concise.json")
    regenerate["messages"][-2]["content"] = text
    shorter, _ = streamed(deployment.post(regenerate))

    for answer, answer_chunks in ((text, chunks), (zh_text, zh_chunks)):
        annotations = [
            a for c in answer_chunks if c["choices"] for a in c["choices"][0]["delta"].get("annotations", [])
        ]
        assert annotations and all(a["type"] == "url_citation" for a in annotations)
        first = annotations[0]["url_citation"]
        assert answer[first["start_index"] : first["end_index"]] == "[1]"
    contents = [json.loads(t["choices"][0]["message"]["content"]) for t in titles]
    assert contents[0] == {"title": "Reset my password"}
    assert contents[1]["tags"] and contents[2]["follow_ups"]
    assert "[1]" in shorter  # the model rewrote the previous answer with its sources (the simulator: not shorter)
    # the three questions are recorded; the three tasks are not
    assert deployment.conversations() - before == 3


def test_statuses_carry_their_reason_phrases(deployment: Deployment) -> None:
    limited = manage(deployment.env, "apikey", "create", "--name", "one a minute", "--rate-limit", "1").strip()
    body = {"model": "chat", "messages": [{"role": "user", "content": QUESTION}]}

    assert deployment.post(body, key=limited).status_code == 200
    refused = deployment.post(body, key=limited)

    assert refused.status_code == 429 and refused.reason_phrase == "Too Many Requests"
    assert int(refused.headers["retry-after"]) >= 1


def test_form_links_are_absolute(deployment: Deployment) -> None:
    answer = deployment.post({"model": "chat", "messages": [{"role": "user", "content": "請問要下載哪一份申請表？"}]})

    completion = answer.json()
    downloads = [s["download_url"] for s in completion["search_results"] if s.get("kind") == "form"]
    assert downloads and all(url.startswith(PUBLIC + "/forms/") for url in downloads)
    pdf = deployment.worker.http.get(downloads[0].removeprefix(PUBLIC))
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF")


def test_langchain_chat_openai_invokes_and_streams(deployment: Deployment) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    model = langchain_openai.ChatOpenAI(
        model="chat", base_url=deployment.base_url, api_key=deployment.key, max_retries=0, timeout=60
    )

    reply = model.invoke([("system", "You are helpful."), ("human", QUESTION)])
    assert "[1]" in reply.content
    assert reply.response_metadata["finish_reason"] == "stop"

    pieces = list(model.stream("如何重設密碼？"))
    assert "[1]" in "".join(str(piece.content) for piece in pieces)
    # a client that binds tools still gets an answer, never a tool call
    with_tools = model.bind_tools([{"type": "function", "function": {"name": "search", "parameters": {}}}])
    answer = with_tools.invoke(QUESTION)
    assert answer.tool_calls == [] and "[1]" in answer.content


def test_litellm_completion_with_api_base(deployment: Deployment) -> None:
    litellm = pytest.importorskip("litellm")
    messages = [{"role": "user", "content": QUESTION}]

    reply = litellm.completion(
        model="openai/chat", api_base=deployment.base_url, api_key=deployment.key, messages=messages, num_retries=0
    )
    assert "[1]" in reply.choices[0].message.content

    stream = litellm.completion(
        model="openai/chat", api_base=deployment.base_url, api_key=deployment.key, messages=messages, stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
    assert "[1]" in text
