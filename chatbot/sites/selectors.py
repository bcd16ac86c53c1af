"""Which sites may embed the assistant, served from memory (refreshed on every worker on change)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from django.db import DatabaseError

from chatbot.sites.models import Site
from chatbot.sites.origins import origin_normalise
from infra.feedcopy import FeedCopy

TOPIC = "sites"


@dataclass(frozen=True, slots=True)
class EmbedSite:
    """What the transports and the widget need of a site."""

    key: str
    name: str
    origins: tuple[str, ...]
    greeting: str
    suggestions: tuple[str, ...]
    default_language: str
    color: str
    position: str
    daily_limit: int
    visitor_daily_limit: int


@dataclass(frozen=True, slots=True)
class SiteTable:
    by_key: dict[str, EmbedSite]
    by_origin: dict[str, EmbedSite]


def _site(row: Site) -> EmbedSite:
    origins = tuple(o for o in (origin_normalise(line) for line in row.origins.splitlines()) if o)
    return EmbedSite(
        key=row.key,
        name=row.name,
        origins=origins,
        greeting=row.greeting.strip(),
        suggestions=tuple(line.strip() for line in row.suggestions.splitlines() if line.strip()),
        default_language=row.default_language,
        color=row.color,
        position=row.position,
        daily_limit=row.daily_limit,
        visitor_daily_limit=row.visitor_daily_limit,
    )


def site_table_read() -> SiteTable:
    """The enabled sites, from the database (blocking)."""
    try:
        sites = [_site(row) for row in Site.objects.filter(enabled=True)]
    except DatabaseError:
        sites = []
    return SiteTable(
        by_key={site.key: site for site in sites},
        by_origin={origin: site for site in sites for origin in site.origins},
    )


memory: FeedCopy[SiteTable] = FeedCopy(TOPIC)


def site_table() -> SiteTable:
    """Blocking only when the copy was dropped (sync code)."""
    return memory.load(site_table_read)


async def asite_table() -> SiteTable:
    held = memory.peek()
    return held if held is not None else await asyncio.to_thread(memory.load, site_table_read)


def site_by_key(key: str) -> EmbedSite | None:
    return site_table().by_key.get(key)


async def asite_for_origin(origin: str) -> EmbedSite | None:
    """The enabled site that allows `origin` (as the browser sent it), or None."""
    normalised = origin_normalise(origin)
    return (await asite_table()).by_origin.get(normalised) if normalised else None


def site_for_origin(origin: str) -> EmbedSite | None:
    normalised = origin_normalise(origin)
    return site_table().by_origin.get(normalised) if normalised else None
