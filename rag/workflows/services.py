"""Writes: creating, saving (every save is archived), validating, restoring, publishing and unpublishing drafts.

Publishing changes what serves traffic: after the transaction commits, every worker is told (the change
feed's `WORKFLOWS_TOPIC`, dispatched in this worker at once) and switches within a second.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from infra.changefeed import publish_on_commit
from rag.runtime import BACKENDS
from rag.workflows.checks import publish_check_gate
from rag.workflows.default import DEFAULT_WORKFLOW
from rag.workflows.graphs import graph_check, graph_clean
from rag.workflows.live import WORKFLOWS_TOPIC
from rag.workflows.models import WorkflowDraft, WorkflowDraftVersion

__all__ = [
    "DraftConflict",
    "PublishRefused",
    "workflow_draft_copy_default",
    "workflow_draft_create",
    "workflow_draft_publish",
    "workflow_draft_restore",
    "workflow_draft_save",
    "workflow_draft_unpublish",
    "workflow_draft_validate",
]

logger = logging.getLogger(__name__)

RESERVED_NAMES = frozenset({"default"})
MAX_NOTE_CHARS = 200


class DraftConflict(Exception):
    """Someone saved the draft after the editor loaded it; the message says which versions."""


class PublishRefused(Exception):
    def __init__(self, message: str, problems: list[dict[str, str]]) -> None:
        super().__init__(message)
        self.problems = problems


def _author(user: Any) -> Any:
    return user if getattr(user, "is_authenticated", False) and getattr(user, "pk", None) else None


def _name_clean(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValidationError("'name' is required", code="required")
    name = name.strip()
    if len(name) > 100:
        raise ValidationError("'name' is at most 100 characters", code="max_length")
    if name.lower() in RESERVED_NAMES:
        raise ValidationError(f"'{name}' is the built-in workflow's name; choose another", code="reserved")
    return name


def _archive(draft: WorkflowDraft, *, author: Any, note: str) -> None:
    WorkflowDraftVersion.objects.create(
        draft=draft,
        version=draft.version,
        graph=draft.graph,
        valid=draft.valid,
        author=author,
        note=note[:MAX_NOTE_CHARS],
    )
    # The seed's `workflow.saved` event: one line per archived version.
    logger.info(
        "workflow.saved draft=%s name=%s version=%s valid=%s problems=%d",
        draft.pk,
        draft.name,
        draft.version,
        draft.valid,
        len(draft.problems),
    )


def _check_into(draft: WorkflowDraft) -> None:
    check = graph_check(draft.graph)
    draft.problems = check.problems
    draft.valid = check.valid


def workflow_draft_create(*, name: object, graph: Any = None, user: Any = None, note: str = "") -> WorkflowDraft:
    """A new draft at version 1 (archived). ValidationError for a bad or taken name, GraphShapeError for a graph
    that is not JSON of the workflow's shape."""
    name = _name_clean(name)
    graph = graph_clean(
        copy.deepcopy(graph) if graph is not None else {"name": name, "entry": "", "nodes": [], "edges": []}
    )
    author = _author(user)
    with transaction.atomic():
        if WorkflowDraft.objects.filter(name=name).exists():
            raise ValidationError(f"a draft named '{name}' exists already", code="unique")
        draft = WorkflowDraft(name=name, graph=graph, version=1, author=author)
        _check_into(draft)
        draft.save()
        _archive(draft, author=author, note=note or "created")
    return draft


def workflow_draft_copy_default(*, name: object, user: Any = None) -> WorkflowDraft:
    """A new editable draft holding the shipped workflow (the default itself cannot be edited)."""
    graph = copy.deepcopy(DEFAULT_WORKFLOW) | {"name": _name_clean(name)}
    return workflow_draft_create(name=name, graph=graph, user=user, note="copied from the default workflow")


def workflow_draft_save(
    *, draft_id: int, graph: Any, user: Any = None, note: str = "", expected_version: int | None = None
) -> WorkflowDraft:
    """Store `graph` as the draft's next version, validated, and archive it.

    `expected_version`: the version the editor loaded; a save made by someone else in between raises
    DraftConflict instead of being overwritten.
    """
    graph = graph_clean(copy.deepcopy(graph))
    author = _author(user)
    with transaction.atomic():
        draft = WorkflowDraft.objects.select_for_update().get(pk=draft_id)
        if expected_version is not None and draft.version != expected_version:
            raise DraftConflict(
                f"'{draft.name}' was saved by someone else meanwhile (now v{draft.version}, you edited "
                f"v{expected_version}); reload it, or save yours as a copy"
            )
        draft.graph = graph
        draft.version += 1
        draft.author = author
        _check_into(draft)
        draft.save()
        _archive(draft, author=author, note=note)
    return draft


def workflow_draft_validate(*, draft_id: int) -> WorkflowDraft:
    """Run the engine's validator on the saved graph again (node types may have changed since) and store it."""
    with transaction.atomic():
        draft = WorkflowDraft.objects.select_for_update().get(pk=draft_id)
        _check_into(draft)
        draft.save(update_fields=["problems", "valid", "updated_at"])
    return draft


def workflow_draft_restore(*, draft_id: int, version: int, user: Any = None) -> WorkflowDraft:
    """Save archived `version`'s graph, unchanged, as the draft's next version."""
    archived = WorkflowDraftVersion.objects.get(draft_id=draft_id, version=version)
    return workflow_draft_save(draft_id=draft_id, graph=archived.graph, user=user, note=f"restored v{version}")


def workflow_draft_publish(
    *, draft_id: int, backend: object, user: Any = None, override_reason: str = ""
) -> WorkflowDraft:
    """Make the draft's saved graph the pipeline of `backend` (replacing whichever draft served it).

    Raises PublishRefused with the engine's problems when the graph cannot run, ValidationError for an unknown
    backend. A draft serves one backend: publishing it to another moves it there.
    """
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValidationError(f"'backend' must be one of {', '.join(BACKENDS)}, not {backend!r}", code="invalid")
    with transaction.atomic():
        draft = WorkflowDraft.objects.select_for_update().get(pk=draft_id)
        _check_into(draft)
        if not draft.valid:
            draft.save(update_fields=["problems", "valid", "updated_at"])
            raise PublishRefused(
                f"'{draft.name}' v{draft.version} cannot be published: {len(draft.problems)} problem(s)", draft.problems
            )
        # the test set: a regression blocks the version unless staff override it with a reason (recorded)
        publish_check_gate(
            draft=draft, override_reason=override_reason, overridden_by=getattr(_author(user), "username", "") or ""
        )
        # First free the backend: the database allows one published draft per backend at any moment.
        WorkflowDraft.objects.filter(published=True, backend=backend).exclude(pk=draft.pk).update(
            published=False, backend="", published_version=None, published_graph=None, published_at=None
        )
        draft.published = True
        draft.backend = backend
        draft.published_version = draft.version
        draft.published_graph = copy.deepcopy(draft.graph)
        draft.published_at = timezone.now()
        draft.save()
        publish_on_commit(WORKFLOWS_TOPIC)
    logger.info(
        "workflow.published draft=%s name=%s version=%s backend=%s by=%s",
        draft.pk,
        draft.name,
        draft.version,
        backend,
        getattr(_author(user), "pk", "-"),
    )
    return draft


def workflow_draft_unpublish(*, draft_id: int, user: Any = None) -> WorkflowDraft:
    """Stop serving the draft; its backend returns to the default workflow. Unpublishing twice is harmless."""
    with transaction.atomic():
        draft = WorkflowDraft.objects.select_for_update().get(pk=draft_id)
        backend = draft.backend
        if draft.published:
            draft.published = False
            draft.backend = ""
            draft.published_version = None
            draft.published_graph = None
            draft.published_at = None
            draft.save()
            publish_on_commit(WORKFLOWS_TOPIC)
    logger.info(
        "workflow.unpublished draft=%s name=%s backend=%s by=%s",
        draft.pk,
        draft.name,
        backend or "-",
        getattr(_author(user), "pk", "-"),
    )
    return draft
