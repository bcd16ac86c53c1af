"""Reads of the prompt registry.

`prompt_get` / `aprompt_get` are the hot path of every pipeline request: they answer from memory
(`prompts.memory`, dropped in every worker when prompts change) and touch the database only when the snapshot is
missing. The async variant then makes one thread hop (the database source), or one hop to Langfuse plus one to
the database when Langfuse fails.

With Langfuse as the source no request waits on Langfuse once a copy is held (stale-while-revalidate): an
expired copy is served at once while one background fetch per prompt refreshes it (`prompts.refresh`), and a
failed fetch keeps the copy another TTL. Only the first load of a prompt, with nothing to serve, waits for the
fetch, at most `PROMPT_LANGFUSE_TIMEOUT`, and falls back to the database.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future

from channels.db import database_sync_to_async
from django.db import connections

from prompts.catalogue import LATEST, PRODUCTION, spec_get
from prompts.errors import PromptError, PromptNotFoundError, PromptSourceError
from prompts.langfuse_source import langfuse_prompt_fetch
from prompts.memory import LangfuseSettings, memory
from prompts.models import Prompt
from prompts.refresh import SingleFlight
from prompts.snapshot import PromptSnapshot, snapshot_build

logger = logging.getLogger(__name__)

# One Langfuse fetch in flight per (name, label); the catalogue has a handful of prompts, so 16 is never reached
# by the pipeline's own reads.
langfuse_refreshes = SingleFlight(name="prompt-refresh", max_in_flight=16)


def prompt_get(*, name: str, label: str = PRODUCTION) -> PromptSnapshot:
    """The version of `name` holding `label`, from memory when fresh (sync: not for use on an event loop).

    Raises PromptNotFoundError for a name outside the catalogue or a label no version holds.
    """
    snapshot = memory.peek(name, label)
    if snapshot is not None:
        return snapshot
    spec_get(name)
    if memory.settings.langfuse is not None:
        snapshot = _remote_resolve(name, label)
        if snapshot is not None:
            return snapshot
    return _database_resolve(name, label)


async def aprompt_get(*, name: str, label: str = PRODUCTION) -> PromptSnapshot:
    """`prompt_get` for async code: no hop when the memory copy is fresh, never blocks the event loop."""
    snapshot = memory.peek(name, label)
    if snapshot is not None:
        return snapshot
    spec_get(name)
    if memory.settings.langfuse is not None:
        snapshot = _stale_serve(name, label)
        if snapshot is not None:
            return snapshot
        # Plain thread, not the shared ORM thread: a slow Langfuse must not hold up other database work.
        snapshot = await asyncio.to_thread(_remote_resolve, name, label)
        if snapshot is not None:
            return snapshot
    return await database_sync_to_async(_database_resolve)(name, label)


def prompt_versions_list(*, name: str) -> list[tuple[int, tuple[str, ...]]]:
    """(version, labels) of every version of `name`, newest first (for the admin's compare picker)."""
    rows = Prompt.objects.filter(name=name).order_by("-version").values_list("version", "labels")
    return [(version, tuple(labels or ())) for version, labels in rows]


# --- Langfuse: stale-while-revalidate ---------------------------------------------------------------------------
def _stale_serve(name: str, label: str) -> PromptSnapshot | None:
    """An expired copy, with its refresh started: no I/O, safe on the loop."""
    held = memory.peek_copy(name, label)
    config = memory.settings.langfuse
    if held is None or config is None:
        return None
    snapshot, expired, epoch = held
    if expired:
        _refresh_start(config, name, label, epoch=epoch)
    return snapshot


def _refresh_start(
    config: LangfuseSettings, name: str, label: str, *, epoch: int
) -> Future[PromptSnapshot | None] | None:
    return langfuse_refreshes.start((name, label), lambda: _langfuse_refresh(config, name, label, epoch=epoch))


def _langfuse_refresh(config: LangfuseSettings, name: str, label: str, *, epoch: int) -> PromptSnapshot | None:
    """Fetch one prompt and keep it; on failure keep the copy held for another TTL. Runs on a refresh thread."""
    ttl = memory.settings.langfuse_ttl
    try:
        snapshot = langfuse_prompt_fetch(config=config, name=name, label=label)
    except PromptSourceError as exc:
        memory.warn_throttled(
            f"langfuse:{name}:{label}", "Langfuse prompt unavailable, serving the copy held or the database: %s", exc
        )
        memory.hold(name, label, epoch=epoch, ttl=ttl)
        return None
    memory.store(snapshot, label=label, epoch=epoch, ttl=ttl)
    return snapshot


# --- loading (sync; run in a thread from async code) ----------------------------------------------------------
def _remote_resolve(name: str, label: str) -> PromptSnapshot | None:
    config = memory.settings.langfuse
    if config is None:
        return None
    snapshot, expired, epoch = memory.lookup_copy(name, label)
    if snapshot is not None:
        if expired:
            _refresh_start(config, name, label, epoch=epoch)
        return snapshot
    # The first load: nothing to serve meanwhile, so wait for the fetch (bounded), then use the database.
    fetch = _refresh_start(config, name, label, epoch=epoch)
    if fetch is None:
        return None
    try:
        return fetch.result(timeout=config.timeout)
    except TimeoutError:
        return None  # the fetch goes on and keeps its result; this request is answered from the database


def _database_resolve(name: str, label: str) -> PromptSnapshot:
    snapshot, epoch = memory.lookup(name, label)
    if snapshot is not None:
        return snapshot
    snapshot = _database_load(name, label)
    # Under the Langfuse source a database copy is a fallback: let it expire so Langfuse is tried again.
    ttl = memory.settings.langfuse_ttl if memory.settings.langfuse is not None else None
    memory.store(snapshot, label=label, epoch=epoch, ttl=ttl)
    return snapshot


def _database_load(name: str, label: str) -> PromptSnapshot:
    versions = (
        Prompt.objects.filter(name=name).order_by("-version").values_list("version", "labels", "template", "config")
    )
    if connections[Prompt.objects.db].features.supports_json_field_contains:
        row = versions.filter(labels__contains=[label]).first()
    else:  # SQLite: no JSON containment lookup; the label is nearly always on one of the newest versions
        row = next((r for r in versions.iterator(chunk_size=20) if label in (r[1] or ())), None)
    if row is None:
        if label in (PRODUCTION, LATEST) and not Prompt.objects.filter(name=name).exists():
            memory.warn_throttled(
                f"catalogue:{name}", "prompt %s has no version in the database; serving its default", name
            )
            return _catalogue_snapshot(name)
        raise PromptNotFoundError(f"no version of prompt {name!r} has the label {label!r}")
    version, labels, template, config = row
    try:
        return snapshot_build(
            name=name, version=version, labels=labels or (), template=template, config=config, source="database"
        )
    except PromptError as exc:
        # Only possible when the catalogue changed under stored versions: keep answering, loudly.
        logger.error("prompt %s v%s no longer fits the catalogue (%s); serving its default", name, version, exc)
        return _catalogue_snapshot(name)


def _catalogue_snapshot(name: str) -> PromptSnapshot:
    spec = spec_get(name)
    return snapshot_build(
        name=name,
        version=0,
        labels=(PRODUCTION, LATEST),
        template=spec.template,
        config=spec.config,
        source="catalogue",
    )
