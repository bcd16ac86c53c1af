"""An immutable copy of one prompt version, held in memory and shared by every request of a worker."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from prompts.templating import CompiledTemplate, check_render_variables
from prompts.validation import validate_name, validate_template


@dataclass(frozen=True, slots=True)
class PromptSnapshot:
    name: str
    version: int  # 0 for the catalogue default served when the database holds no version of the name
    labels: tuple[str, ...]
    template: str
    config: Mapping[str, Any]  # read-only; `dict(snapshot.config)` for a mutable copy
    source: str  # "database" | "langfuse" | "catalogue"
    allowed_variables: frozenset[str]
    compiled: CompiledTemplate = field(repr=False, compare=False)

    @property
    def variables(self) -> frozenset[str]:
        """The variables this version's template uses (a subset of `allowed_variables`)."""
        return self.compiled.variables

    def render(self, /, **variables: object) -> str:
        """The template with each `{{name}}` replaced by `str(value)` (None renders as "").

        Pass every allowed variable: a variable the prompt does not allow, or one its template uses that is
        missing, raises PromptRenderError.
        """
        check_render_variables(
            label=f"prompt {self.name} v{self.version}",
            used=self.compiled.variables,
            allowed=self.allowed_variables,
            given=variables,
        )
        return self.compiled.render(variables)


def snapshot_build(
    *, name: str, version: int, labels: Iterable[str], template: str, config: Mapping[str, Any] | None, source: str
) -> PromptSnapshot:
    """A snapshot with its template compiled once; raises PromptValidationError for a template it refuses."""
    spec = validate_name(name)
    compiled = validate_template(name=name, template=template)
    return PromptSnapshot(
        name=name,
        version=version,
        labels=tuple(labels),
        template=template,
        config=MappingProxyType(copy.deepcopy(dict(config or {}))),
        source=source,
        allowed_variables=spec.variables,
        compiled=compiled,
    )
