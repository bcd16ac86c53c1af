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
from rag.branding.texts import Organisation, OrganisationSource

PLANNER = "planner-system"
QUERY_REWRITER = "query-rewriter-system"
UNIFIED_AGENT = "unified-agent-system"
CONVERSATION_SUMMARIZER = "conversation-summarizer"
TRANSLATOR = "translator-system"
QUERY_VARIATION = "query-variation-system"

_NEUTRAL = Organisation().prompt_variables()


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

    async def get(self, name: str) -> Any:
        # The organisation's variables default to the neutral words; OrganisationPrompts gives the real ones.
        return _WithOrganisation(await self._get(name), _NEUTRAL)

    async def _get(self, name: str) -> PromptSnapshot:
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


class _WithOrganisation:
    """A prompt version whose `render` also fills the organisation's variables its template may use."""

    def __init__(self, snapshot: Any, variables: Mapping[str, str]) -> None:
        self._snapshot = snapshot
        allowed: frozenset[str] = getattr(snapshot, "allowed_variables", frozenset())
        self._variables = {name: value for name, value in variables.items() if name in allowed}

    @property
    def config(self) -> Mapping[str, Any]:
        return self._snapshot.config

    def __getattr__(self, name: str) -> Any:
        # the rest of the version (its name, version number, labels, source) as the snapshot has it: telemetry
        # and evaluation runs name the version they used
        return getattr(self._snapshot, name)

    def render(self, /, **variables: object) -> str:
        return self._snapshot.render(**{**self._variables, **variables})


class OrganisationPrompts:
    """Prompts with the organisation's name and words as template variables (`{{organisation}}`,
    `{{organisation_scope}}`, `{{organisation_contact}}`), so nodes need not pass them and no prompt names a
    particular organisation in its text."""

    def __init__(self, inner: Any, organisation: OrganisationSource) -> None:
        self._inner = inner
        self._organisation = organisation

    async def get(self, name: str) -> Any:
        snapshot = await self._inner.get(name)
        organisation = await self._organisation.get()
        return _WithOrganisation(snapshot, organisation.prompt_variables())
