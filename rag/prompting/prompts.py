"""Prompt providers for the LLM nodes.

Nodes ask `deps.prompts.get(name)` and never touch the ORM. In a server, `RegistryPrompts` serves the versions
labelled in the prompt registry (from memory; see prompts.selectors). `CataloguePrompts` serves the built-in
defaults without Django or a database: node tests use it, and so does a pipeline built without a registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prompts.catalogue import LATEST, PRODUCTION, spec_get
from prompts.snapshot import PromptSnapshot, snapshot_build

PLANNER = "planner-system"
QUERY_REWRITER = "query-rewriter-system"
UNIFIED_AGENT = "unified-agent-system"
CONVERSATION_SUMMARIZER = "conversation-summarizer"
TRANSLATOR = "translator-system"
QUERY_VARIATION = "query-variation-system"


class CataloguePrompts:
    """The catalogue's default text of every prompt, optionally with some templates (and configs) replaced."""

    def __init__(
        self,
        templates: Mapping[str, str] | None = None,
        configs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self._templates = dict(templates or {})
        self._configs = {name: dict(config) for name, config in (configs or {}).items()}
        self._built: dict[str, PromptSnapshot] = {}

    async def get(self, name: str) -> PromptSnapshot:
        snapshot = self._built.get(name)
        if snapshot is None:
            spec = spec_get(name)  # PromptNotFoundError for a name outside the catalogue
            snapshot = self._built[name] = snapshot_build(
                name=name,
                version=0,
                labels=(PRODUCTION, LATEST),
                template=self._templates.get(name, spec.template),
                config=self._configs.get(name, dict(spec.config)),
                source="catalogue",
            )
        return snapshot


class RegistryPrompts:
    """The prompt registry's version holding `label` (served from memory; a thread hop only when stale)."""

    def __init__(self, *, label: str = PRODUCTION) -> None:
        self.label = label

    async def get(self, name: str) -> PromptSnapshot:
        # Imported here: the selectors load Django models, which a Django-free caller of this module never needs.
        from prompts.selectors import aprompt_get

        return await aprompt_get(name=name, label=self.label)
