"""rag.wiring: settings become one LLM backend per process, the prompt registry, and the concurrency manager's
limits; bad values fail with the variable's name; live settings reach the running call policy."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from concurrency.live.apply import settings_apply, settings_forget
from concurrency.live.snapshot import SettingsSnapshot
from concurrency.manager import LLMConcurrencyManager, get_manager, set_manager
from rag.branding.texts import Organisation
from rag.llm import LLMBackend
from rag.prompting.prompts import OrganisationPrompts, RegistryPrompts
from rag.wiring import build_deps, configure_concurrency_manager, parse_node_map

# building the dependencies opens the store, which reads the database
pytestmark = pytest.mark.django_db


@pytest.fixture
def isolated(settings: Any, private_index: str) -> Iterator[Any]:
    """Settings of this test's own: its own (empty) store, no live settings row, a fresh manager."""
    settings_forget()
    set_manager(LLMConcurrencyManager({"default": 1, "chat": 1, "responses": 1, "embedding": 1}))
    yield settings
    settings_forget()
    set_manager(None)


def snapshot(**changes: Any) -> SettingsSnapshot:
    values: dict[str, Any] = {
        "version": 1,
        "limits": {"default": 2, "chat": 2, "responses": 2, "embedding": 2},
        "priority_enabled": False,
        "starvation_threshold": 10.0,
        "acquire_timeout": 5.0,
        "max_waiters": 10,
        "rpm": {"chat": 7, "responses": 7},
        "retry_max_attempts": 2,
        "retry_base_seconds": 0.5,
        "retry_max_seconds": 4.0,
        "llm_request_timeout": 33.0,
    }
    values.update(changes)
    return SettingsSnapshot(**values)


def test_without_llm_base_url_the_pipeline_stays_offline(isolated: Any) -> None:
    isolated.LLM_BASE_URL = ""
    isolated.RAG_CURATED_ENABLED = False
    deps = build_deps()
    try:
        assert deps.llm is None and deps.prompts is None and deps.cleanups == []
    finally:
        deps.close()


def test_llm_settings_build_one_backend_with_per_node_models(isolated: Any) -> None:
    isolated.LLM_BASE_URL = "http://127.0.0.1:9/v1"
    isolated.LLM_CHAT_MODEL = "qwen-chat"
    isolated.LLM_NODE_MODELS = "planner=qwen-small, response_synth=qwen-big"
    isolated.LLM_NODE_TEMPERATURES = "planner=0.1"
    isolated.LLM_RPM_LIMIT = 30
    isolated.LLM_RETRY_MAX_ATTEMPTS = 4
    isolated.LLM_FIRST_TOKEN_TIMEOUT = 7.0
    deps = build_deps()
    try:
        llm = deps.llm
        assert isinstance(llm, LLMBackend) and isinstance(deps.prompts, OrganisationPrompts)
        assert llm.config.model_for("chat", "planner") == "qwen-small"
        assert llm.config.model_for("responses", "response_synth") == "qwen-big"
        assert llm.config.model_for("chat", "query_builder") == "qwen-chat"
        assert llm.config.temperature_for("planner") == 0.1
        assert llm.config.first_token_timeout == 7.0
        assert llm.policy.config.rpm_for("chat") == 30 and llm.policy.config.max_attempts == 4

        # The live settings row reaches the running policy, validated, in place...
        settings_apply(snapshot())
        assert llm.policy.config.rpm_for("chat") == 7 and llm.policy.config.rpm_for("embedding") == 0
        assert (llm.policy.config.max_attempts, llm.policy.config.backoff_max) == (2, 4.0)
        assert llm.config.total_timeout == 33.0
        assert llm.policy.limiter.limit("chat") == 7  # the limiter reads the same config object
    finally:
        deps.close()
    # ...until the dependencies are closed.
    settings_apply(snapshot(version=2, retry_max_attempts=5))
    assert llm.policy.config.max_attempts == 2


@pytest.mark.parametrize(
    ("variable", "raw"),
    [("LLM_NODE_TEMPERATURES", "planner=hot"), ("LLM_NODE_MODELS", "planner"), ("LLM_NODE_MODELS", "=m")],
)
def test_bad_per_node_values_name_the_variable(isolated: Any, variable: str, raw: str) -> None:
    isolated.LLM_BASE_URL = "http://127.0.0.1:9/v1"
    setattr(isolated, variable, raw)
    with pytest.raises(ImproperlyConfigured, match=variable):
        build_deps()


def test_parse_node_map_skips_blanks() -> None:
    assert parse_node_map("X", " planner = a ,, response_synth=b ", str) == {"planner": "a", "response_synth": "b"}
    assert parse_node_map("X", "", float) == {}


def test_the_manager_takes_its_limits_from_settings_unless_the_live_row_was_applied(isolated: Any) -> None:
    isolated.LLM_MAX_CONCURRENT_CHAT = 3
    isolated.LLM_MAX_CONCURRENT_RESPONSES = 5
    isolated.LLM_PRIORITY_ENABLED = True
    isolated.LLM_MAX_WAITERS = 17
    manager = configure_concurrency_manager()
    assert manager is get_manager()
    assert (manager.limit("chat"), manager.limit("responses"), manager.mode, manager.max_waiters) == (
        3,
        5,
        "priority",
        17,
    )

    settings_apply(snapshot(limits={"chat": 9}))
    isolated.LLM_MAX_CONCURRENT_CHAT = 4
    configure_concurrency_manager()
    assert get_manager().limit("chat") == 9  # staff's live value stands


@pytest.mark.django_db(transaction=True)
async def test_registry_prompts_serve_the_production_version() -> None:
    from prompts.memory import memory

    memory.reset()
    try:
        snapshot = await RegistryPrompts().get("planner-system")
        assert "production" in snapshot.labels
        assert "Language of the message: en" in snapshot.render(
            language="en", summary="", **Organisation().prompt_variables()
        )
    finally:
        memory.reset()
