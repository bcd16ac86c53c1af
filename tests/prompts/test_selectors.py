import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async

import prompts.selectors as selectors
from prompts.catalogue import CATALOGUE
from prompts.errors import PromptNotFoundError
from prompts.memory import memory, prompts_follow
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
        clock.advance(3600)  # nothing to check: the change feed tells this worker when prompts change
        assert prompt_get(name=NAME) is first


@pytest.mark.django_db
def test_change_in_another_worker_is_seen_once_the_change_feed_tells(django_capture_on_commit_callbacks):
    assert prompt_get(name=NAME).version == 1
    # Another worker creates v2 as production; its on-commit hooks publish on the change feed, not to our memory.
    with django_capture_on_commit_callbacks(execute=False):
        prompt_version_create(name=NAME, template=NEW_TEXT, config={}, labels=["production"])
    assert prompt_get(name=NAME).version == 1  # memory

    async_to_sync(prompts_follow)()  # what this worker's watcher runs when the topic moves

    assert prompt_get(name=NAME).version == 2


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
async def test_aprompt_get_makes_no_hop_when_held_and_one_after_a_change(monkeypatch, clock):
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
    clock.advance(3600)
    assert await aprompt_get(name=NAME, label="latest") is first
    assert hops == []
    await prompts_follow()  # prompts changed somewhere: the next read loads them again, once
    again = await aprompt_get(name=NAME, label="latest")
    assert (again.version, again.template) == (first.version, first.template)
    assert await aprompt_get(name=NAME, label="latest") is again
    assert hops == ["_database_resolve"]


def _move_production_as_another_worker(*, to_version: int) -> None:
    """Another worker's roll-back: rows change and the topic is published; this worker's memory is untouched."""
    Prompt.objects.filter(name=NAME).exclude(version=to_version).update(labels=[])
    Prompt.objects.filter(name=NAME, version=to_version).update(labels=["production"])


# Transactional (the async path reads the database from another thread). These tests create their own versions:
# the flush after a transactional test removes the seeded ones.
@pytest.mark.django_db(transaction=True)
async def test_aprompt_get_sees_a_change_from_another_worker(clock):
    create = database_sync_to_async(prompt_version_create)
    older = await create(name=NAME, template=NEW_TEXT, config={})
    newer = await create(name=NAME, template=NEW_TEXT + "\nBe brief.", config={}, labels=["production"])
    assert (await aprompt_get(name=NAME)).version == newer.version  # this worker's own change: seen at once
    await database_sync_to_async(_move_production_as_another_worker)(to_version=older.version)
    assert (await aprompt_get(name=NAME)).version == newer.version
    await prompts_follow()  # the change feed's watcher, told of the topic
    assert (await aprompt_get(name=NAME)).version == older.version
    held = memory.peek(NAME, "production")
    assert held is not None and held.version == older.version
