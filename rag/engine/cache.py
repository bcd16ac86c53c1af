"""Compiled graphs cached by a hash of their definition and compile-time parameters."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from rag.engine.definition import WorkflowDefinition
from rag.engine.graph import CompiledGraph


class GraphCache:
    def __init__(self, *, max_entries: int = 32) -> None:
        self._entries: OrderedDict[str, CompiledGraph] = OrderedDict()
        self._max_entries = max_entries
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or_compile(
        self,
        definition: WorkflowDefinition,
        compile_fn: Callable[[WorkflowDefinition, str], CompiledGraph],
        *,
        params: Any = None,
    ) -> CompiledGraph:
        key = definition.fingerprint(params)
        with self._lock:
            graph = self._entries.get(key)
            if graph is not None:
                self.hits += 1
                self._entries.move_to_end(key)
                return graph
            self.misses += 1
        graph = compile_fn(definition, key)
        with self._lock:
            self._entries[key] = graph
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
        return graph

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            total = self.hits + self.misses
            return {
                "size": len(self._entries),
                "max_entries": self._max_entries,
                "hits": self.hits,
                "misses": self.misses,
                "hit_rate": round(self.hits / total, 4) if total else 0.0,
                "keys": [key[:12] for key in self._entries],
            }
