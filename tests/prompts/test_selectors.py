import pytest
from channels.db import database_sync_to_async
from django.core.cache import cache

import prompts.selectors as selectors
from prompts.catalogue import CATALOGUE
from prompts.errors import PromptNotFoundError
from prompts.memory import GENERATION_KEY, memory
from prompts.models import Prompt
from prompts.selectors import aprompt_get, prompt_get
from prompts.services import prompt_label_move, prompt_version_create
from rag.branding.texts import Organisation

NAME = "unified-agent-system"
NEW_TEXT = "Answer in {{language}} from:\n{{sources}}"


@pytest.mark.django_db
def test_prompt_get_serves_the_production_snapshot():
    snapshot = prompt_get(name=NAME)
    assert (snapshot.name, snapshot.version, snapshot.source) == (NAME, 1, "database")
    assert snapshot.labels == ("production", "latest")
    assert snapshot.template == CATALOGUE[NAME].template
    assert snapshot.config["temperature"] == 0.2
    assert "[1] Reset your password" in snapshot.render(
        language="en", sources="[1] Reset your password", summary="", **Organisation().prompt_variables()
    )


@pytest.mark.django_db
def test_fresh_memory_copy_costs_no_query(django_assert_num_queries, clock):
    first = prompt_get(name=NAME)
    with django_assert_num_queries(0):
        assert prompt_get(name=NAME) is first
        clock.advance(1.5)  # generation check due: one cache read, still no query
        assert prompt_get(name=NAME) is first


@pytest.mark.django_db
def test_change_in_another_worker_is_seen_within_the_interval(clock, django_capture_on_commit_callbacks):
    assert prompt_get(name=NAME).version == 1
    # Another worker creates v2 as production; its on-commit hook bumps the shared generation, not our memory.
    with django_capture_on_commit_callbacks(execute=False):
        prompt_version_create(name=NAME, template=NEW_TEXT, config={}, labels=["production"])
    cache.set(GENERATION_KEY, 42)
    clock.advance(0.5)
    assert prompt_get(name=NAME).version == 1  # inside the check interval: memory
    clock.advance(0.6)
    assert prompt_get(name=NAME).version == 2  # 1.1 s later: generation re-read, snapshots dropped


@pytest.mark.django_db
def test_change_in_this_worker_is_seen_at_once(django_capture_on_commit_callbacks):
    assert prompt_get(name=NAME).version == 1
    with django_capture_on_commit_callbacks(execute=True):
        prompt_version_create(name=NAME, template=NEW_TEXT, config={}, labels=["production"])
    assert prompt_get(name=NAME).version == 2
    with django_capture_on_commit_callbacks(execute=True):
        prompt_label_move(name=NAME, label="production", version=1)  # roll back
    assert prompt_get(name=NAME).version == 1


@pytest.mark.django_db
def test_check_interval_is_configurable(settings, clock, django_capture_on_commit_callbacks):
    settings.PROMPT_CACHE_CHECK_INTERVAL = 5.0
    assert prompt_get(name=NAME).version == 1
    with django_capture_on_commit_callbacks(execute=False):
        prompt_version_create(name=NAME, template=NEW_TEXT, config={}, labels=["production"])
    cache.set(GENERATION_KEY, "another worker")
    clock.advance(4.0)
    assert prompt_get(name=NAME).version == 1
    clock.advance(1.0)
    assert prompt_get(name=NAME).version == 2


@pytest.mark.django_db
def test_labels_are_served_separately():
    prompt_version_create(name=NAME, template=NEW_TEXT, config={}, labels=["staging"])
    assert prompt_get(name=NAME).version == 1
    assert prompt_get(name=NAME, label="staging").version == 2
    assert prompt_get(name=NAME, label="latest").version == 2


@pytest.mark.django_db
def test_unknown_name_or_label_is_a_clear_error(django_assert_num_queries):
    with django_assert_num_queries(0), pytest.raises(PromptNotFoundError, match="unknown prompt"):
        prompt_get(name="no-such-prompt")
    with pytest.raises(
        PromptNotFoundError, match="no version of prompt 'unified-agent-system' has the label 'staging'"
    ):
        prompt_get(name=NAME, label="staging")


@pytest.mark.django_db
def test_a_name_without_any_version_is_served_from_the_catalogue():
    Prompt.objects.filter(name=NAME).delete()
    snapshot = prompt_get(name=NAME)
    assert (snapshot.version, snapshot.source, snapshot.template) == (0, "catalogue", CATALOGUE[NAME].template)


@pytest.mark.django_db(transaction=True)
async def test_aprompt_get_makes_no_hop_when_fresh_and_one_when_due(monkeypatch, clock):
    created = await database_sync_to_async(prompt_version_create)(name=NAME, template=NEW_TEXT, config={})
    first = await aprompt_get(name=NAME, label="latest")
    assert (first.version, first.template) == (created.version, NEW_TEXT)

    hops = []
    real_hop = selectors.database_sync_to_async

    def counting_hop(func):
        hops.append(func.__name__)
        return real_hop(func)

    monkeypatch.setattr(selectors, "database_sync_to_async", counting_hop)
    assert await aprompt_get(name=NAME, label="latest") is first
    assert hops == []
    clock.advance(1.1)
    assert await aprompt_get(name=NAME, label="latest") is first  # generation unchanged: same snapshot
    assert hops == ["_database_resolve"]
    assert await aprompt_get(name=NAME, label="latest") is first
    assert hops == ["_database_resolve"]


def _move_production_as_another_worker(*, to_version: int) -> None:
    """Another worker's roll-back: rows change and the shared generation moves; this worker's memory is untouched."""
    Prompt.objects.filter(name=NAME).exclude(version=to_version).update(labels=[])
    Prompt.objects.filter(name=NAME, version=to_version).update(labels=["production"])
    cache.set(GENERATION_KEY, "bumped by another worker")


# Transactional (the async path reads the database from another thread). These tests create their own versions:
# the flush after a transactional test removes the seeded ones.
@pytest.mark.django_db(transaction=True)
async def test_aprompt_get_sees_a_change_from_another_worker(clock):
    create = database_sync_to_async(prompt_version_create)
    older = await create(name=NAME, template=NEW_TEXT, config={})
    newer = await create(name=NAME, template=NEW_TEXT + "\nBe brief.", config={}, labels=["production"])
    assert (await aprompt_get(name=NAME)).version == newer.version  # this worker's own change: seen at once
    await database_sync_to_async(_move_production_as_another_worker)(to_version=older.version)
    clock.advance(0.9)
    assert (await aprompt_get(name=NAME)).version == newer.version
    clock.advance(0.1)
    assert (await aprompt_get(name=NAME)).version == older.version
    held = memory.peek(NAME, "production")
    assert held is not None and held.version == older.version
