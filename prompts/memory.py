"""The in-process prompt store: snapshots served from memory, dropped in every worker when prompts change.

Every change drops this process's snapshots after commit and publishes `PROMPTS_TOPIC` on the change feed
(infra.changefeed); every worker's watcher then runs `prompts_follow`, which drops its snapshots too. A lookup is a
dict read: no database, no cache, no thread hop.

Snapshots from Langfuse (and database fallbacks taken while Langfuse failed) also expire after
`PROMPT_LANGFUSE_CACHE_TTL` seconds, since a change made in Langfuse bumps nothing here. An expired copy is
still held: it is served while one background fetch refreshes it (prompts.selectors), and kept for another TTL
when that fetch fails. A change drops expired and fresh copies alike.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from prompts.snapshot import PromptSnapshot

logger = logging.getLogger(__name__)

PROMPTS_TOPIC = "prompts"
SOURCES = ("database", "langfuse")


@dataclass(frozen=True, slots=True)
class LangfuseSettings:
    host: str
    public_key: str
    secret_key: str
    timeout: float


@dataclass(frozen=True, slots=True)
class RegistrySettings:
    source: str
    langfuse: LangfuseSettings | None  # set only when the source is langfuse and the keys are configured
    langfuse_ttl: float
    warning_interval: float


def registry_settings_load() -> RegistrySettings:
    source = getattr(settings, "PROMPT_SOURCE", "database") or "database"
    langfuse = None
    if source == "langfuse":
        public_key = getattr(settings, "LANGFUSE_PUBLIC_KEY", "") or ""
        secret_key = getattr(settings, "LANGFUSE_SECRET_KEY", "") or ""
        host = getattr(settings, "LANGFUSE_HOST", "") or "https://cloud.langfuse.com"
        if public_key and secret_key:
            langfuse = LangfuseSettings(
                host=host.rstrip("/"),
                public_key=public_key,
                secret_key=secret_key,
                timeout=float(getattr(settings, "PROMPT_LANGFUSE_TIMEOUT", 2.0)),
            )
    return RegistrySettings(
        source=source,
        langfuse=langfuse,
        langfuse_ttl=float(getattr(settings, "PROMPT_LANGFUSE_CACHE_TTL", 60.0)),
        warning_interval=float(getattr(settings, "PROMPT_LANGFUSE_WARNING_INTERVAL", 60.0)),
    )


@dataclass(frozen=True, slots=True)
class _Entry:
    snapshot: PromptSnapshot
    expires_at: float | None


def _expired(entry: _Entry, now: float) -> bool:
    return entry.expires_at is not None and now >= entry.expires_at


class PromptMemory:
    """Snapshots by (name, label). Thread-safe: lookups are plain dict reads, writes take a lock."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._epoch = 0  # bumped on every drop, so a load that started before it is not stored after it
        self._settings: RegistrySettings | None = None
        self._warned_at: dict[str, float] = {}

    @property
    def settings(self) -> RegistrySettings:
        loaded = self._settings
        if loaded is None:
            loaded = self._settings = registry_settings_load()
        return loaded

    def settings_reload(self) -> None:
        self._settings = None

    # --- reads without I/O --------------------------------------------------------------------------------
    def peek(self, name: str, label: str) -> PromptSnapshot | None:
        """The snapshot if one is held and fresh; None means "ask `refresh`"."""
        return self._fresh(name, label, self.clock())

    def peek_copy(self, name: str, label: str) -> tuple[PromptSnapshot, bool, int] | None:
        """(the copy held, whether it expired, epoch for `store`); None when none is held."""
        epoch = self._epoch  # read first: a drop after it makes a store with it a no-op
        entry = self._entries.get((name, label))
        return None if entry is None else (entry.snapshot, _expired(entry, self.clock()), epoch)

    def _fresh(self, name: str, label: str, now: float) -> PromptSnapshot | None:
        entry = self._entries.get((name, label))
        if entry is None or _expired(entry, now):
            return None
        return entry.snapshot

    def lookup(self, name: str, label: str) -> tuple[PromptSnapshot | None, int]:
        """(fresh snapshot or None, epoch to hand back to `store`)."""
        epoch = self._epoch
        return self._fresh(name, label, self.clock()), epoch

    def lookup_copy(self, name: str, label: str) -> tuple[PromptSnapshot | None, bool, int]:
        """(the copy held or None, whether it expired, epoch for `store`)."""
        held = self.peek_copy(name, label)
        return (None, False, self._epoch) if held is None else held

    # --- writes -------------------------------------------------------------------------------------------
    def store(self, snapshot: PromptSnapshot, *, label: str, epoch: int, ttl: float | None) -> None:
        with self._lock:
            if epoch != self._epoch:
                return  # dropped while this snapshot was being loaded: it may be stale
            expires_at = None if ttl is None else self.clock() + ttl
            self._entries[(snapshot.name, label)] = _Entry(snapshot, expires_at)

    def hold(self, name: str, label: str, *, epoch: int, ttl: float) -> None:
        """Keep the copy held for another `ttl` seconds: its refresh failed, so the next try waits that long
        rather than following on every request."""
        with self._lock:
            entry = self._entries.get((name, label))
            if epoch == self._epoch and entry is not None:
                self._entries[(name, label)] = _Entry(entry.snapshot, self.clock() + ttl)

    def drop(self) -> None:
        """Forget every snapshot of this worker (`prompts_follow` does the same in the others)."""
        with self._lock:
            self._drop_locked()

    def _drop_locked(self) -> None:
        self._entries.clear()
        self._epoch += 1

    def reset(self) -> None:
        """Back to the state of a fresh worker (tests)."""
        with self._lock:
            self._drop_locked()
            self._settings = None
            self._warned_at.clear()

    def warn_throttled(self, key: str, message: str, *args: object) -> None:
        """Log a warning at most once per `PROMPT_LANGFUSE_WARNING_INTERVAL` seconds for `key`."""
        now = self.clock()
        last = self._warned_at.get(key)
        if last is not None and now - last < self.settings.warning_interval:
            return
        self._warned_at[key] = now
        logger.warning(message, *args)


memory = PromptMemory()


async def prompts_follow(topic: str = PROMPTS_TOPIC) -> None:
    """The change feed's handler for `PROMPTS_TOPIC`: prompts changed in some worker, drop the copies held here."""
    memory.drop()


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: object) -> None:
    if setting.startswith(("PROMPT_", "LANGFUSE_")):
        memory.settings_reload()
        memory.drop()
