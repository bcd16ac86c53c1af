"""The committed translations: the compiled catalogue (what the server reads) matches its source."""

from __future__ import annotations

import gettext
import html
import json
import re
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import translation

from rag.documents.models import DocumentStatus, IndexJob, JobStatus
from rag.workflows.builder_words import PARAMETER_HELP, builder_words
from rag.workflows.graphs import node_registry

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "locale" / "zh_Hant" / "LC_MESSAGES"


def po_entries(path: Path) -> dict[str, str]:
    """msgid -> msgstr of a .po file (multi-line strings joined), the header and untranslated entries left out."""
    entries = {}
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        match = re.search(r'^msgid ((?:".*"\n)+)msgstr ((?:".*"\n?)+)', block + "\n", re.MULTILINE)
        if not match or re.search(r"^msgctxt ", block, re.MULTILINE):
            continue
        msgid, msgstr = (unescape("".join(re.findall(r'"(.*)"', part))) for part in match.groups())
        if msgid and msgstr:
            entries[msgid] = msgstr
    return entries


def po_context_entries(path: Path) -> dict[tuple[str, str], str]:
    """(msgctxt, msgid) -> msgstr of a .po file's translated entries that have a context."""
    entries = {}
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        match = re.search(r'^msgctxt ((?:".*"\n)+)msgid ((?:".*"\n)+)msgstr ((?:".*"\n?)+)', block + "\n", re.MULTILINE)
        if not match:
            continue
        context, msgid, msgstr = (unescape("".join(re.findall(r'"(.*)"', part))) for part in match.groups())
        if msgstr:
            entries[context, msgid] = msgstr
    return entries


def po_plural_entries(path: Path) -> dict[tuple[str, str], str]:
    """(msgid, msgid_plural) -> msgstr[0] of a .po file's translated plural entries (zh-hant has one form)."""
    entries = {}
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        match = re.search(
            r'^msgid ((?:".*"\n)+)msgid_plural ((?:".*"\n)+)msgstr\[0\] ((?:".*"\n?)+)', block + "\n", re.MULTILINE
        )
        if not match:
            continue
        msgid, plural, msgstr = (unescape("".join(re.findall(r'"(.*)"', part))) for part in match.groups())
        if msgstr:
            entries[msgid, plural] = msgstr
    return entries


def unescape(text: str) -> str:
    """A .po string's escapes (\\", \\n) undone, as msgfmt does; non-ASCII text kept as it is."""
    return text.encode().decode("unicode_escape").encode("latin-1").decode()


def test_the_compiled_catalogue_holds_every_translation_of_its_source() -> None:
    with (CATALOGUE / "django.mo").open("rb") as handle:
        compiled = gettext.GNUTranslations(handle)
    entries = po_entries(CATALOGUE / "django.po")
    assert "Documents and index jobs" in entries
    for msgid, msgstr in entries.items():
        assert compiled.gettext(msgid) == msgstr, f"django.mo is older than django.po for {msgid!r}: compilemessages"


def test_the_compiled_catalogue_holds_every_translation_with_a_context() -> None:
    with (CATALOGUE / "django.mo").open("rb") as handle:
        compiled = gettext.GNUTranslations(handle)
    entries = po_context_entries(CATALOGUE / "django.po")
    assert ("concurrency mode", "priority") in entries
    for (context, msgid), msgstr in entries.items():
        assert compiled.pgettext(context, msgid) == msgstr, f"django.mo is older than django.po for {msgid!r}"


def test_the_compiled_catalogue_holds_every_plural_translation_of_its_source() -> None:
    with (CATALOGUE / "django.mo").open("rb") as handle:
        compiled = gettext.GNUTranslations(handle)
    entries = po_plural_entries(CATALOGUE / "django.po")
    assert ("%(count)d key revoked.", "%(count)d keys revoked.") in entries
    for (msgid, plural), msgstr in entries.items():
        for n in (1, 2):
            assert compiled.ngettext(msgid, plural, n) == msgstr, f"django.mo is older than django.po for {msgid!r}"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("language", "words", "absent"),
    [("en", ["succeeded", "failed", "running"], "成功"), ("zh-hant", ["成功", "失敗", "執行中"], ">succeeded<")],
)
def test_the_job_list_names_the_job_states_in_the_admin_language(
    admin_client: Client, language: str, words: list[str], absent: str
) -> None:
    for status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.RUNNING):
        IndexJob.objects.create(status=status)
    page = admin_client.get(reverse("admin:rag_documents_indexjob_changelist"), HTTP_ACCEPT_LANGUAGE=language)
    cells = re.findall(r'<td class="field-status">(.*?)</td>', page.content.decode())
    assert sorted(cells) == sorted(words)
    assert absent not in page.content.decode()  # nor in the status filter


@pytest.mark.django_db
def test_a_job_status_api_answers_the_stored_state_whatever_the_language(admin_client: Client) -> None:
    job = IndexJob.objects.create(status=JobStatus.SUCCEEDED)
    with translation.override("zh-hant"):
        answer = admin_client.get(
            reverse("rag-index-job", kwargs={"job_id": job.pk}), HTTP_ACCEPT_LANGUAGE="zh-hant"
        ).json()
    assert answer["status"] == "succeeded"


def test_every_node_parameters_help_has_a_word_for_the_graph_builder() -> None:
    described = {
        spec["description"]
        for node_type in node_registry().catalogue()
        for spec in node_type["params"].values()
        if spec["description"]
    }
    missing = sorted(described - set(PARAMETER_HELP))
    assert not missing, f"add to PARAMETER_HELP in rag/workflows/builder_words.py (and translate): {missing}"
    with translation.override("zh-hant"):
        words = builder_words()
    assert [text for text in described if words[text] == text] == [], "a parameter's help has no zh-hant"


@pytest.mark.django_db
@pytest.mark.parametrize(("language", "running"), [("en", "running"), ("zh-hant", "執行中")])
def test_a_job_page_names_its_state_and_gives_its_script_the_names_in_the_admin_language(
    admin_client: Client, language: str, running: str
) -> None:
    job = IndexJob.objects.create(status=JobStatus.RUNNING)
    page = admin_client.get(
        reverse("admin:rag_documents_indexjob_change", args=[job.pk]), HTTP_ACCEPT_LANGUAGE=language
    ).content.decode()
    assert f'<dd data-rag-job="status">{running}</dd>' in page
    carried = re.search(r'data-words="([^"]*)"', page)
    assert carried, "the job page carries no words for its script"
    assert json.loads(html.unescape(carried.group(1)))["statuses"]["running"] == running


def test_a_deleted_document_is_named_as_a_state_not_as_the_jobs_count_of_deleted_ones() -> None:
    with translation.override("zh-hant"):
        assert str(dict(DocumentStatus.choices)["deleted"]) == "已刪除"
        assert str(IndexJob._meta.get_field("deleted").verbose_name) == "刪除"
