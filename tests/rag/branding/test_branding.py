"""The organisation's name and words: set once (command or admin), seen by the chat page and the offline rules,
refreshed in every worker through the change feed."""

from __future__ import annotations

import asyncio
import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from infra.changefeed import ChangeWatcher, Registry, change_watch_start, change_watch_stop
from rag.branding.memory import TOPIC, OrganisationMemory, memory
from rag.branding.selectors import organisation_read, organisation_source
from rag.branding.texts import DEFAULT_EN
from rag.nodes.response_synth import ResponseSynth
from tests.rag.nodes.support import make_state, make_writer
from tests.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)

ACME = ["--name", "Acme Library Helper", "--tagline", "Ask the Acme library", "--contact", "phone Acme on 555-0100",
        "--scope", "I only answer questions about the Acme library.", "--suggest", "How do I renew a book?",
        "--suggest", "When is the library open?"]  # fmt: skip


@pytest.fixture(autouse=True)
def fresh_memory():
    memory.drop()
    yield
    memory.drop()


def test_branding_set_reaches_the_chat_page_in_both_languages() -> None:
    out = StringIO()
    call_command("branding", "set", *ACME, stdout=out)
    assert "Set contact, name, out_of_scope, suggestions, tagline." in out.getvalue()
    page = Client().get("/")
    html = page.content.decode()
    assert "<title>Acme Library Helper · Help centre</title>" in html
    assert "Ask the Acme library" in html
    config = json.loads(html.split('id="chat-config" type="application/json">')[1].split("</script>")[0])
    texts = config["organisation"]["texts"]
    # Set without an English twin, the text is used for English replies too.
    assert texts["en"]["name"] == texts["zh-hant"]["name"] == "Acme Library Helper"
    assert texts["en"]["suggestions"] == ["How do I renew a book?", "When is the library open?"]
    assert "LearnHub" not in html and "學習e站" not in html


def test_bad_colour_is_refused_by_name() -> None:
    with pytest.raises(CommandError, match="colour must be #rrggbb"):
        call_command("branding", "set", "--color", "blue", stdout=StringIO())


async def test_offline_refusals_use_the_words_from_the_database() -> None:
    from asgiref.sync import sync_to_async

    await sync_to_async(call_command)("branding", "set", *ACME, stdout=StringIO())
    node = ResponseSynth(
        stream_chunk_chars=50,
        forms_base_url="/forms/",
        forms_export_url="/x.csv",
        max_sentences=5,
        min_sentences=2,
        contact_zh="",
        contact_en="",
        organisation=organisation_source(),
    )
    state = make_state(normalized_question="Who won the match?", language="en", intent="out_of_scope")
    state.should_retrieve = False
    await node.run(state, make_writer()[0])
    assert state.answer == "I only answer questions about the Acme library."
    state = make_state(normalized_question="Zebra?", language="en", intent="simple_faq", retrieved=[])
    await node.run(state, make_writer()[0])
    assert "phone Acme on 555-0100" in state.answer


async def test_another_worker_drops_its_copy_when_the_change_feed_carries_a_change(settings) -> None:
    """Another worker's copy, followed by a watcher of its own: a change by a command reaches it through the
    change feed's table (no Redis here), and it reads the new words once."""
    settings.REDIS_URL = ""
    other = OrganisationMemory(TOPIC)
    registry = Registry()
    registry.on_change(TOPIC, other.drop)
    assert (await asyncio.to_thread(other.load, organisation_read)).en.name == DEFAULT_EN.name
    change_watch_start(ChangeWatcher(registry=registry, poll_interval=0.02))
    try:
        await until(lambda: other.peek() is None, within=2)  # the watcher's first read runs every handler
        await asyncio.to_thread(other.load, organisation_read)
        held = other.peek()
        assert held is not None and held.en.name == DEFAULT_EN.name  # memory only until a change

        await asyncio.to_thread(call_command, "branding", "set", "--name", "Acme Helper", stdout=StringIO())

        await until(lambda: other.peek() is None, within=2)
        assert (await asyncio.to_thread(other.load, organisation_read)).en.name == "Acme Helper"
    finally:
        await change_watch_stop()
