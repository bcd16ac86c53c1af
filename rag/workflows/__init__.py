"""Workflow definitions shipped with the product (staff drafts live in the database)."""

from rag.workflows.default import DEFAULT_WORKFLOW, default_workflow

__all__ = ["DEFAULT_WORKFLOW", "default_workflow"]
