"""Who may use the workflow APIs: active staff; changes also need the draft change permission.

Every entry point of this app goes through `staff_api` (the admin pages through `admin_site.admin_view`), the
project's one access check (`infra.access`): sessions only, CSRF-checked on writes, refusals JSON 403,
never a login redirect: the builder's scripts and tests read them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from infra.access import Policy, Rule
from infra.access import staff_api as _checked

CHANGE_PERMISSION = "rag_workflows.change_workflowdraft"

READ = Rule(refusal="staff session required")
CHANGE = Policy(read=READ, write=Rule(refusal="staff session required", permission=CHANGE_PERMISSION))


def staff_api(*, change: bool = False) -> Callable[[Any], Any]:
    """Decorator for sync and async views: 403 JSON unless an active staff user (with the change permission
    when `change`, for unsafe methods only, so reading stays open to every staff member)."""
    return _checked(CHANGE if change else Policy(read=READ))
