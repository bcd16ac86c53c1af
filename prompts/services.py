"""Writes of the prompt registry. Versions are immutable; labels move between versions of a name.

Every write locks the name's rows (`select_for_update`; on SQLite the IMMEDIATE transaction takes the write
lock at BEGIN), so a label is held by at most one version and version numbers do not collide. After commit,
every worker's in-memory prompts are invalidated (this one's at once, the others' through the change feed).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction

from infra.changefeed import publish_on_commit
from prompts.catalogue import LATEST, PRODUCTION
from prompts.errors import PromptNotFoundError, PromptValidationError
from prompts.memory import PROMPTS_TOPIC, memory
from prompts.models import Prompt
from prompts.validation import validate_config, validate_label, validate_labels, validate_template


class PublishGate(Protocol):
    """Asked, inside the label move's transaction, before `version` of `name` (maybe one being created, so never
    tested) becomes production; raises PromptPublishBlocked to refuse. Registered by the apps that test answers
    (this app runs no pipeline: rag.workflows registers its test set's gate), so prompts never import them."""

    def __call__(self, *, name: str, version: int, override_reason: str, overridden_by: str) -> None: ...


_PUBLISH_GATES: list[PublishGate] = []


def prompt_publish_gate_register(gate: PublishGate) -> Callable[[], None]:
    """Add a gate (once); returns its removal."""
    if gate not in _PUBLISH_GATES:
        _PUBLISH_GATES.append(gate)
    return lambda: _PUBLISH_GATES.remove(gate) if gate in _PUBLISH_GATES else None


def _publish_gates_ask(name: str, version: int, override_reason: str, overridden_by: str) -> None:
    for gate in _PUBLISH_GATES:
        gate(name=name, version=version, override_reason=override_reason, overridden_by=overridden_by)


def prompt_cache_invalidate() -> None:
    """Invalidate the prompts held in memory by every worker, after the current transaction commits."""
    transaction.on_commit(memory.drop, robust=True)
    publish_on_commit(PROMPTS_TOPIC)


def _locked_versions(name: str) -> list[Prompt]:
    return list(
        Prompt.objects.select_for_update().filter(name=name).order_by("-version").only("id", "version", "labels")
    )


def _take_label(rows: Iterable[Prompt], label: str, *, keep: Prompt | None = None) -> None:
    """Remove `label` from every row but `keep` (rows are locked by the caller)."""
    keep_pk = keep.pk if keep is not None else None
    for row in rows:
        if row.pk != keep_pk and label in row.labels:
            row.labels = [x for x in row.labels if x != label]
            row.save(update_fields=["labels"])


def prompt_version_create(
    *,
    name: str,
    template: str,
    config: dict[str, Any] | None,
    author: User | AnonymousUser | None = None,
    note: str = "",
    labels: Iterable[str] = (),
    override_reason: str = "",
) -> Prompt:
    """Create version max+1 of `name`; it takes the `latest` label and any `labels` given (e.g. production).

    Created straight into production, it passes the publish gates first (a new version was never tested: with a
    test set, that needs `override_reason`).

    Raises PromptValidationError for an unknown name, a variable the name does not allow (named in the
    message and in `.variables`), unbalanced braces, a bad config or a bad label.
    """
    validate_template(name=name, template=template)
    config = validate_config(config)
    wanted = validate_labels([*labels, LATEST])
    if not isinstance(author, User):  # an anonymous user (or none) is recorded as no author
        author = None
    with transaction.atomic():
        rows = _locked_versions(name)
        version = (rows[0].version if rows else 0) + 1
        if PRODUCTION in wanted:
            _publish_gates_ask(name, version, override_reason, getattr(author, "username", "") or "")
        for label in wanted:
            _take_label(rows, label)
        prompt = Prompt.objects.create(
            name=name,
            version=version,
            labels=wanted,
            template=template,
            config=config,
            author=author,
            note=note[: Prompt._meta.get_field("note").max_length],
        )
        prompt_cache_invalidate()
    return prompt


def prompt_label_move(
    *, name: str, label: str, version: int, override_reason: str = "", overridden_by: str = "", gated: bool = True
) -> Prompt:
    """Give `label` to `version` of `name`, taking it from whichever version held it (promote or roll back).

    `latest` follows the newest version by itself and cannot be moved. Production passes the publish gates first
    (PromptPublishBlocked unless `override_reason`); a roll-back (`gated=False`) returns to a version that served.
    """
    validate_label(label)
    if label == LATEST:
        raise PromptValidationError(
            "the 'latest' label always marks the newest version; it cannot be moved", field="labels"
        )
    with transaction.atomic():
        rows = _locked_versions(name)
        target = next((row for row in rows if row.version == version), None)
        if target is None:
            raise PromptNotFoundError(f"prompt {name!r} has no version {version}")
        if label in target.labels:
            return target
        if label == PRODUCTION and gated:
            _publish_gates_ask(name, version, override_reason, overridden_by)
        _take_label(rows, label, keep=target)
        target.labels = [*target.labels, label]
        target.save(update_fields=["labels"])
        prompt_cache_invalidate()
    return target


def prompt_rollback(*, name: str, label: str = PRODUCTION) -> Prompt:
    """Move `label` to the highest version below the one holding it now."""
    with transaction.atomic():
        rows = _locked_versions(name)
        holder = next((row for row in rows if label in row.labels), None)
        if holder is None:
            raise PromptNotFoundError(f"no version of prompt {name!r} has the label {label!r}")
        previous = next((row for row in rows if row.version < holder.version), None)
        if previous is None:
            raise PromptValidationError(
                f"{name} v{holder.version} is the first version: nothing to roll back to", field="labels"
            )
        return prompt_label_move(name=name, label=label, version=previous.version, gated=False)


def _config_lines(config: Any) -> list[str]:
    return json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False).splitlines(keepends=True)


def _ensure_newline(lines: list[str]) -> list[str]:
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return lines


def prompt_diff(*, name: str, version_a: int, version_b: int) -> str:
    """Unified diff from `version_a` to `version_b`: the template, then the config. Empty when identical."""
    rows = {
        row.version: row
        for row in Prompt.objects.filter(name=name, version__in=[version_a, version_b]).only(
            "version", "template", "config"
        )
    }
    for version in (version_a, version_b):
        if version not in rows:
            raise PromptNotFoundError(f"prompt {name!r} has no version {version}")
    a, b = rows[version_a], rows[version_b]
    template_diff = difflib.unified_diff(
        _ensure_newline(a.template.splitlines(keepends=True)),
        _ensure_newline(b.template.splitlines(keepends=True)),
        fromfile=f"{name} v{version_a} template",
        tofile=f"{name} v{version_b} template",
    )
    config_diff = difflib.unified_diff(
        _ensure_newline(_config_lines(a.config)),
        _ensure_newline(_config_lines(b.config)),
        fromfile=f"{name} v{version_a} config",
        tofile=f"{name} v{version_b} config",
    )
    return "".join([*template_diff, *config_diff])
