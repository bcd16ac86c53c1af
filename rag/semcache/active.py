"""The semantic cache this process's pipeline uses, for the writes and the admin that act on it from outside.

Its own module so that the record writes (`rag.semcache.services`) reach the cache without importing it: the
cache imports the writes, and they read the active one here.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rag.semcache.cache import SemanticCache

__all__ = ["activate", "active_cache", "deactivate"]

_active: SemanticCache | None = None
_active_lock = threading.Lock()


def active_cache() -> SemanticCache | None:
    """The cache this process's pipeline uses (for the admin and the invalidation hook), if one was built."""
    return _active


def activate(cache: SemanticCache) -> None:
    global _active
    with _active_lock:
        _active = cache


def deactivate(cache: SemanticCache) -> None:
    global _active
    with _active_lock:
        if _active is cache:
            _active = None
