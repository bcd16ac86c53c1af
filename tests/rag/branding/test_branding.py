"""The organisation's name and words: set once (command or admin), seen by the chat page and the offline rules,
refreshed in every worker through the generation in Django's cache."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.test import Client

from rag.branding.memory import GENERATION_KEY, OrganisationMemory, memory
from rag.branding.models import Branding
from rag.branding.selectors import organisation_read, organisation_source
from rag.branding.texts import DEFAULT_EN
from rag.nodes.response_synth import ResponseSynth
from tests.rag.nodes.support import make_state, make_writer

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


def test_another_worker_sees_a_change_after_its_check_interval(settings) -> None:
    settings.BRANDING_CHECK_INTERVAL = 5.0
    now = [100.0]
    other = OrganisationMemory(clock=lambda: now[0])  # another worker's copy
    assert other.load(organisation_read).en.name == DEFAULT_EN.name
    call_command("branding", "set", "--name", "Acme Helper", stdout=StringIO())
    assert cache.get(GENERATION_KEY) is not None
    now[0] += 1.0
    peeked = other.peek()
    assert peeked is not None and peeked.en.name == DEFAULT_EN.name  # not checked yet: memory only
    now[0] += 5.0
    assert other.peek() is None  # a check is due
    assert other.load(organisation_read).en.name == "Acme Helper"


def test_without_a_shared_cache_a_change_by_another_process_is_read_at_the_next_check(settings) -> None:
    """A command's change bumps the generation in its own process's memory only: the server re-reads the row."""
    if "locmem" not in settings.CACHES["default"]["BACKEND"].lower():
        pytest.skip("with Redis the generation is shared; the test above covers it")
    settings.BRANDING_CHECK_INTERVAL = 0.0
    other = OrganisationMemory()
    other.load(organisation_read)
    Branding.objects.update_or_create(pk=1, defaults={"name": "From a command"})  # no bump this worker can see
    assert other.load(organisation_read).zh.name == "From a command"
