"""Checks shared by the services, the admin form and the Langfuse source: one place says what is valid."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from prompts.catalogue import CATALOGUE, PromptSpec
from prompts.errors import PromptValidationError
from prompts.templating import CompiledTemplate, compile_template

_LABEL = re.compile(r"[a-z0-9][a-z0-9_.-]{0,35}\Z")
MAX_TEMPLATE_CHARS = 50_000


def validate_name(name: str) -> PromptSpec:
    spec = CATALOGUE.get(name)
    if spec is None:
        raise PromptValidationError(
            f"unknown prompt {name!r}; known prompts: {', '.join(sorted(CATALOGUE))}", field="name"
        )
    return spec


def validate_template(*, name: str, template: str) -> CompiledTemplate:
    """The compiled template, or PromptValidationError naming the syntax problem or the refused variables."""
    spec = validate_name(name)
    if not template.strip():
        raise PromptValidationError("the template is empty")
    if len(template) > MAX_TEMPLATE_CHARS:
        raise PromptValidationError(f"the template is longer than {MAX_TEMPLATE_CHARS} characters")
    compiled = compile_template(template)
    unknown = sorted(compiled.variables - spec.variables)
    if unknown:
        listed = ", ".join("{{%s}}" % v for v in unknown)  # noqa: UP031 - braces would need quadrupling
        allowed = ", ".join("{{%s}}" % v for v in sorted(spec.variables))  # noqa: UP031
        raise PromptValidationError(
            f"{name} does not allow the variable(s) {listed}; allowed: {allowed}", variables=unknown
        )
    return compiled


def _number(config: dict[str, Any], key: str, low: float, high: float) -> None:
    value = config.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise PromptValidationError(f"config {key!r} must be a number from {low} to {high}", field="config")


def validate_config(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise PromptValidationError('config must be a JSON object such as {"temperature": 0.2}', field="config")
    _number(config, "temperature", 0, 2)
    _number(config, "top_p", 0, 1)
    max_tokens = config.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise PromptValidationError("config 'max_tokens' must be a positive integer", field="config")
    model = config.get("model")
    if model is not None and not isinstance(model, str):
        raise PromptValidationError("config 'model' must be a string", field="config")
    return dict(config)


def validate_label(label: str) -> str:
    if not isinstance(label, str) or not _LABEL.match(label):
        raise PromptValidationError(
            f"invalid label {label!r}: lower-case letters, digits, '.', '_' or '-', at most 36 characters",
            field="labels",
        )
    return label


def validate_labels(labels: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for label in labels:
        if validate_label(label) not in seen:
            seen.append(label)
    return seen
