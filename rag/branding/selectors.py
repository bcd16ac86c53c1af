"""Reads of the organisation's words and of the demo's state."""

from __future__ import annotations

from django.db import DatabaseError

from rag.branding.memory import MemoryOrganisation, memory
from rag.branding.models import Branding, DemoState
from rag.branding.texts import DEFAULT_EN, DEFAULT_ZH, LocalTexts, Organisation


def _lines(value: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in value.splitlines() if line.strip())


def organisation_from_row(row: Branding | None) -> Organisation:
    if row is None:
        return Organisation()
    zh = LocalTexts(
        name=row.name or DEFAULT_ZH.name,
        tagline=row.tagline,
        welcome=row.welcome,
        contact=row.contact or DEFAULT_ZH.contact,
        out_of_scope=row.out_of_scope or DEFAULT_ZH.out_of_scope,
        suggestions=_lines(row.suggestions),
    )
    en = LocalTexts(
        name=row.name_en or zh.name,
        tagline=row.tagline_en or zh.tagline,
        welcome=row.welcome_en or zh.welcome,
        contact=row.contact_en or zh.contact or DEFAULT_EN.contact,
        out_of_scope=row.out_of_scope_en or zh.out_of_scope,
        suggestions=_lines(row.suggestions_en) or zh.suggestions,
    )
    return Organisation(
        zh=zh,
        en=en,
        logo_url=row.logo_url,
        color=row.color or "#0b5cab",
        privacy_url=row.privacy_url,
        version=row.version,
    )


def organisation_read() -> Organisation:
    """From the database (blocking). A database not migrated yet reads as the neutral defaults."""
    try:
        return organisation_from_row(Branding.objects.filter(pk=1).first())
    except DatabaseError:
        return Organisation()


def organisation_get() -> Organisation:
    """The organisation's words, from memory (blocking only when a check is due: call from sync code)."""
    return memory.load(organisation_read)


def organisation_source() -> MemoryOrganisation:
    """What a pipeline's deps take (`PipelineDeps.organisation`)."""
    return MemoryOrganisation(organisation_read)


def demo_state_get() -> DemoState | None:
    return DemoState.objects.filter(pk=1).first()


def demo_loaded() -> bool:
    state = demo_state_get()
    return bool(state and state.loaded)
