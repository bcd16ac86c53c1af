"""Reads: drafts and their archived versions as the builder shows them, diffs, and what is published."""

from __future__ import annotations

import copy
import difflib
import json
from dataclasses import dataclass
from typing import Any

from rag.workflows.default import DEFAULT_WORKFLOW
from rag.workflows.graphs import LAYOUT_KEY, graph_without_layout
from rag.workflows.models import WorkflowDraft, WorkflowDraftVersion

DEFAULT_DRAFT_ID = "default"

# (backend, draft id, published version) of every published draft, sorted: changes exactly when what must run
# changes, and is one small indexed query to read.
PublishedSignature = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True, slots=True)
class PublishedWorkflow:
    backend: str
    draft_id: int
    name: str
    version: int
    graph: dict[str, Any]


def _username(user: Any) -> str:
    return user.get_username() if user is not None else ""


def workflow_draft_summary(draft: WorkflowDraft) -> dict[str, Any]:
    return {
        "id": draft.pk,
        "name": draft.name,
        "version": draft.version,
        "valid": draft.valid,
        "problem_count": len(draft.problems or ()),
        "published": draft.published,
        "backend": draft.backend,
        "published_version": draft.published_version,
        "read_only": False,
        "author": _username(draft.author),
        "updated_at": draft.updated_at.isoformat() if draft.updated_at else None,
    }


def workflow_draft_detail(draft: WorkflowDraft) -> dict[str, Any]:
    return {
        **workflow_draft_summary(draft),
        "graph": draft.graph,
        "problems": draft.problems or [],
        "published_at": draft.published_at.isoformat() if draft.published_at else None,
    }


def workflow_default_detail() -> dict[str, Any]:
    """The shipped workflow as a read-only draft: it can be looked at, test-run and copied, never edited."""
    return {
        "id": DEFAULT_DRAFT_ID,
        "name": "default (built-in)",
        "version": 1,
        "valid": True,
        "problem_count": 0,
        "published": False,
        "backend": "",
        "published_version": None,
        "read_only": True,
        "author": "",
        "updated_at": None,
        "graph": copy.deepcopy(DEFAULT_WORKFLOW),
        "problems": [],
        "published_at": None,
    }


def workflow_draft_list() -> list[dict[str, Any]]:
    drafts = WorkflowDraft.objects.select_related("author").order_by("name")
    return [workflow_default_detail() | {"graph": None}, *(workflow_draft_summary(d) for d in drafts)]


def workflow_draft_get(*, draft_id: int) -> WorkflowDraft:
    """The draft; WorkflowDraft.DoesNotExist when there is none."""
    return WorkflowDraft.objects.select_related("author").get(pk=draft_id)


def workflow_draft_versions(*, draft_id: int) -> list[dict[str, Any]]:
    rows = WorkflowDraftVersion.objects.filter(draft_id=draft_id).select_related("author").order_by("-version")
    return [
        {
            "version": row.version,
            "valid": row.valid,
            "author": _username(row.author),
            "note": row.note,
            "created_at": row.created_at.isoformat(),
        }
        for row in rows
    ]


def workflow_draft_version_get(*, draft_id: int, version: int) -> WorkflowDraftVersion:
    """One archived version; WorkflowDraftVersion.DoesNotExist when there is none."""
    return WorkflowDraftVersion.objects.select_related("author").get(draft_id=draft_id, version=version)


def workflow_graph_diff(old: dict[str, Any], new: dict[str, Any], *, old_label: str, new_label: str) -> dict[str, Any]:
    """What changed between two graphs: nodes and edges added, removed or changed, and a unified JSON diff.

    Canvas positions are left out of the text (moving a box changes nothing that runs) and reported as a flag.
    """
    old_nodes = {n.get("id"): n for n in old.get("nodes") or () if isinstance(n, dict)}
    new_nodes = {n.get("id"): n for n in new.get("nodes") or () if isinstance(n, dict)}

    def edge_key(edge: dict[str, Any]) -> str:
        bound = f" (max {edge['max_visits']})" if edge.get("max_visits") else ""
        return f"{edge.get('source')} --{edge.get('route') or 'default'}--> {edge.get('target')}{bound}"

    old_edges = {edge_key(e) for e in old.get("edges") or () if isinstance(e, dict)}
    new_edges = {edge_key(e) for e in new.get("edges") or () if isinstance(e, dict)}

    def text(graph: dict[str, Any]) -> list[str]:
        return json.dumps(graph_without_layout(graph), indent=2, sort_keys=True, ensure_ascii=False).splitlines()

    unified = list(difflib.unified_diff(text(old), text(new), old_label, new_label, lineterm="", n=3))
    return {
        "identical": not unified,
        "layout_changed": old.get(LAYOUT_KEY) != new.get(LAYOUT_KEY),
        "entry": {"old": old.get("entry"), "new": new.get("entry")},
        "nodes_added": sorted(str(k) for k in new_nodes.keys() - old_nodes.keys()),
        "nodes_removed": sorted(str(k) for k in old_nodes.keys() - new_nodes.keys()),
        "nodes_changed": sorted(str(k) for k in old_nodes.keys() & new_nodes.keys() if old_nodes[k] != new_nodes[k]),
        "edges_added": sorted(new_edges - old_edges),
        "edges_removed": sorted(old_edges - new_edges),
        "unified": unified,
    }


def workflow_draft_diff(*, draft_id: int, old_version: int, new_version: int | None) -> dict[str, Any]:
    """Diff of two archived versions of a draft (`new_version` None: against the draft as saved now)."""
    old = workflow_draft_version_get(draft_id=draft_id, version=old_version)
    if new_version is None:
        draft = workflow_draft_get(draft_id=draft_id)
        new_graph, new_label = draft.graph, f"v{draft.version} (current)"
    else:
        new_graph, new_label = (
            workflow_draft_version_get(draft_id=draft_id, version=new_version).graph,
            f"v{new_version}",
        )
    return workflow_graph_diff(old.graph, new_graph, old_label=f"v{old_version}", new_label=new_label)


def workflow_published_signature() -> PublishedSignature:
    rows = WorkflowDraft.objects.filter(published=True).values_list("backend", "pk", "published_version")
    return tuple(sorted((backend, pk, version or 0) for backend, pk, version in rows))


def workflow_published() -> dict[str, PublishedWorkflow]:
    """backend -> the workflow published for it (a backend without one runs the default)."""
    rows = WorkflowDraft.objects.filter(published=True).values_list(
        "backend", "pk", "name", "published_version", "published_graph"
    )
    return {
        backend: PublishedWorkflow(backend=backend, draft_id=pk, name=name, version=version or 0, graph=graph or {})
        for backend, pk, name, version, graph in rows
    }
