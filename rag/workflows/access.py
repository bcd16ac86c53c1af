"""Who may use the workflow APIs: active staff; changes also need the draft change permission.

Every entry point of this app goes through `staff_api` (the admin pages through `admin_site.admin_view`).
Refusals are JSON 403, never a login redirect: the builder's scripts and tests read them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from concurrency.jsonio import json_error

CHANGE_PERMISSION = "rag_workflows.change_workflowdraft"

View = Callable[..., HttpResponse]
AsyncView = Callable[..., Awaitable[HttpResponse]]


def is_staff(user: Any) -> bool:
    return bool(user is not None and getattr(user, "is_active", False) and getattr(user, "is_staff", False))


def forbidden(message: str = "staff session required") -> JsonResponse:
    return json_error(403, "forbidden", message)


def staff_api(*, change: bool = False) -> Callable[[Any], Any]:
    """Decorator for sync and async views: 403 JSON unless an active staff user (with the change permission
    when `change`, for unsafe methods only, so reading stays open to every staff member)."""

    def decorate(view: Any) -> Any:
        if inspect.iscoroutinefunction(view):

            @functools.wraps(view)
            async def checked_async(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
                user = await request.auser()
                if not is_staff(user):
                    return forbidden()
                if change and request.method not in ("GET", "HEAD") and not await user.ahas_perm(CHANGE_PERMISSION):
                    return forbidden("you lack the permission to change workflow drafts")
                return await view(request, *args, **kwargs)

            return checked_async

        @functools.wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            user = request.user
            if not is_staff(user):
                return forbidden()
            if change and request.method not in ("GET", "HEAD") and not user.has_perm(CHANGE_PERMISSION):
                return forbidden("you lack the permission to change workflow drafts")
            return view(request, *args, **kwargs)

        return checked

    return decorate
