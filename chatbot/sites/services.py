"""Adding and changing embedding sites; every worker sees a change within a second (chatbot.sites.selectors)."""

from __future__ import annotations

import secrets

from django.db import transaction

from chatbot.sites.models import Site
from chatbot.sites.origins import origins_parse
from chatbot.sites.selectors import memory


def site_key_new() -> str:
    return "site_" + secrets.token_urlsafe(18)


def site_save(*, site: Site) -> Site:
    """Save a site (a new one gets its key), its origins checked and normalised."""
    site.origins = "\n".join(origins_parse(site.origins))
    if not site.key:
        site.key = site_key_new()
    with transaction.atomic():
        site.save()
        transaction.on_commit(memory.bump)
    return site


def site_create(*, name: str, origins: list[str], default_language: str = "zh-hant", **fields: object) -> Site:
    if not name.strip():
        raise ValueError("a site needs a name")
    if default_language not in ("zh-hant", "en"):
        raise ValueError(f"default language must be zh-hant or en, not {default_language!r}")
    site = Site(name=name.strip(), origins="\n".join(origins), default_language=default_language, **fields)
    return site_save(site=site)


def site_delete(*, site: Site) -> None:
    with transaction.atomic():
        site.delete()
        transaction.on_commit(memory.bump)
