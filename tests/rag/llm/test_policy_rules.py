"""Pure rules of the call policy: backoff with full jitter, Retry-After parsing, configuration checks."""

from __future__ import annotations

import email.utils
import time

import httpx2
import pytest

from rag.llm.config import CallPolicyConfig, LLMConfig
from rag.llm.policy import CallPolicy, retry_after_seconds


def test_backoff_is_exponential_capped_and_fully_jittered() -> None:
    exact = CallPolicy(CallPolicyConfig(backoff_base=1.0, backoff_max=60.0, jitter=False))
    assert [exact.backoff(n) for n in (1, 2, 3, 6, 7, 50)] == [1.0, 2.0, 4.0, 32.0, 60.0, 60.0]
    lowest = CallPolicy(CallPolicyConfig(backoff_base=1.0, backoff_max=60.0), rng=lambda: 0.0)
    highest = CallPolicy(CallPolicyConfig(backoff_base=1.0, backoff_max=60.0), rng=lambda: 0.999)
    assert lowest.backoff(3) == 0.0 and highest.backoff(3) == pytest.approx(3.996)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "soon"}, None),
        ({}, None),
        ({"retry-after": "-3"}, 0.0),
    ],
)
def test_retry_after_header_forms(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after_seconds(httpx2.Headers(headers)) == expected


def test_retry_after_as_http_date() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert retry_after_seconds(httpx2.Headers({"retry-after": when})) == pytest.approx(30, abs=2)


@pytest.mark.parametrize(
    "bad",
    [{"max_attempts": 0}, {"rpm": {"chat": -1}}, {"rpm_window": 0}, {"backoff_base": -1}, {"acquire_timeout": -1}],
)
def test_bad_policy_config_is_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        CallPolicyConfig(**bad)  # type: ignore[arg-type]


def test_llm_config_models_and_validation() -> None:
    cfg = LLMConfig(base_url="http://x/v1", chat_model="c", responses_model="r", node_models={"planner": "p"})
    assert (cfg.model_for("chat", "synth"), cfg.model_for("responses", "synth"), cfg.model_for("chat", "planner")) == (
        "c",
        "r",
        "p",
    )
    assert LLMConfig(base_url="http://x/v1", chat_model="c").model_for("responses", "n") == "c"
    assert cfg.embeddings_url == "http://x/v1" and cfg.embeddings_key == "EMPTY"
    with pytest.raises(ValueError, match="first_token_timeout"):
        LLMConfig(base_url="http://x/v1", first_token_timeout=0)
    with pytest.raises(ValueError, match="base_url"):
        LLMConfig(base_url="")
    embeddings_only = LLMConfig(base_url="", embedding_base_url="http://e/v1")
    assert embeddings_only.embeddings_url == "http://e/v1"
