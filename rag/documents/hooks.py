"""Who wants to know when documents change in the live index.

``on_documents_reindexed(fn)`` registers ``fn(doc_ids)``: after a reindex has switched the live index and its
bookkeeping is committed, ``fn`` gets the ids of the documents whose content changed or that were deleted (the
semantic cache drops answers citing them). Callbacks run in the process that ran the job, on its worker thread;
one that raises is logged and does not affect the job or the other callbacks.

An incremental reindex keeps the index version the semantic cache is scoped by, so this hook is what removes the
answers it outdated. A process with no listener (a reindex run while the server is stopped) is covered too: the
build's index version records the documents it changed, and the cache never serves an answer citing one of them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

logger = logging.getLogger(__name__)

DocumentsCallback = Callable[[frozenset[str]], object]

_lock = threading.Lock()
_callbacks: list[DocumentsCallback] = []


def on_documents_reindexed(fn: DocumentsCallback) -> Callable[[], None]:
    """Register `fn`; returns a function that unregisters it."""
    with _lock:
        _callbacks.append(fn)

    def unsubscribe() -> None:
        with _lock:
            if fn in _callbacks:
                _callbacks.remove(fn)

    return unsubscribe


def documents_reindexed_notify(doc_ids: Iterable[str]) -> None:
    changed = frozenset(doc_ids)
    if not changed:
        return
    with _lock:
        callbacks = list(_callbacks)
    for callback in callbacks:
        try:
            callback(changed)
        except Exception:
            logger.exception("a documents_reindexed callback failed (%d documents)", len(changed))
