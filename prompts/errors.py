"""Errors of the prompt registry. Callers catch `PromptError` for all of them."""

from __future__ import annotations

from collections.abc import Iterable


class PromptError(Exception):
    """Base class of every prompt-registry error."""


class PromptValidationError(PromptError, ValueError):
    """A template, config, name or label was refused. `field` names the input; `variables` the culprits."""

    def __init__(self, message: str, *, field: str = "template", variables: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.variables = tuple(variables)


class PromptNotFoundError(PromptError, LookupError):
    """No such prompt name, version or label."""


class PromptRenderError(PromptError, ValueError):
    """`render()` got a variable the prompt does not allow, or lacks one its template uses."""


class PromptSourceError(PromptError):
    """The remote prompt source (Langfuse) failed or answered something unusable."""


class PromptPublishBlocked(PromptError):
    """Giving a version the production label was refused by a publish gate (the answers' test set found a
    regression, or the version was never run against it) and no override reason was given."""
