"""Every LLM call of the application goes through one place, the LLM backend, and so through the concurrency
manager: no other module calls the OpenAI SDK, and a whole question takes exactly one slot per upstream attempt.

The chat and Responses calls go through the SDK's low-level `client.post` (raw bodies, no per-chunk models), made in
one place, `rag.llm.streams.raw_post`, for the backend's one-shot calls and the streams it opens; embeddings through
the SDK's resource."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from concurrency.manager import LLMConcurrencyManager
from devtools.simulator.testing import SimulatorProcess
from tests.rag.pipeline.conftest import (  # noqa: F401 - fixtures, used by name
    RuntimeFactory,
    ask,
    check_stream,
    demo_retriever,
    make_runtime,
    manager,
    pipeline_simulator,
    sim,
)

PROJECT_DIR = Path(__file__).resolve().parents[2]
APPLICATION_PACKAGES = ("rag", "chatbot", "concurrency", "prompts")
CHOKE_POINTS = ("rag/llm/backends.py", "rag/llm/streams.py")


def dotted(node: ast.expr) -> str:
    """`client.chat.completions` for that attribute chain; `?` stands for anything that is not a plain name."""
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else "?"


def sdk_calls(path: Path) -> list[str]:
    """`<receiver>.create(...)` calls in a file, except the ORM's `Model.objects.create(...)`, and `<client>.post(...)`
    calls (the SDK's low-level request)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("create", "post"):
            receiver = dotted(node.func.value)
            last = receiver.rsplit(".", 1)[-1]
            if (node.func.attr == "create" and last != "objects") or (node.func.attr == "post" and "client" in last):
                found.append(f"{path.relative_to(PROJECT_DIR)}:{node.lineno} {receiver}.{node.func.attr}(...)")
    return found


def test_only_the_llm_backend_calls_the_sdk() -> None:
    calls = [
        call
        for package in APPLICATION_PACKAGES
        for path in sorted((PROJECT_DIR / package).rglob("*.py"))
        for call in sdk_calls(path)
    ]
    elsewhere = [call for call in calls if not call.startswith(tuple(point + ":" for point in CHOKE_POINTS))]
    assert not elsewhere, "LLM calls must go through rag.llm.backends (policy, slot, retries):\n" + "\n".join(elsewhere)
    receivers = sorted(call.split(" ", 1)[1] for call in calls)
    # The scan sees the backend's own calls: the raw post (one-shot and streamed, both APIs, by path) and embeddings.
    assert receivers == ["client.embeddings.create(...)", "client.post(...)"]


@pytest.mark.parametrize("backend", ["chat", "responses"])
async def test_a_question_takes_one_slot_per_upstream_attempt(
    backend: str,
    make_runtime: RuntimeFactory,  # noqa: F811
    manager: LLMConcurrencyManager,  # noqa: F811
    sim: SimulatorProcess,  # noqa: F811
) -> None:
    await sim.afaults(fail_next=["500"])  # one attempt more: the plan's first one fails and is retried

    events = await ask(make_runtime(), "How do I reset my password?", backend=backend)

    assert check_stream(events)["channel"] == "meta_summary"
    upstream = await sim.astats()
    slots = manager.stats()["backends"]
    # the plan twice, the answer (the conversation summary is the chat's, written after the terminal event)
    assert upstream["attempts"] == 3
    assert slots[backend]["total_acquired"] == upstream["endpoints"][backend]["attempts"] == 3
    assert sum(stats["total_acquired"] for stats in slots.values()) == upstream["attempts"]
    assert slots[backend]["total_released"] == slots[backend]["total_acquired"]
