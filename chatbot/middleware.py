"""Request middleware of the project: a body past Django's upload limit as a 413 in the one JSON error shape, and
times shown in the viewer's own time zone.

Django turns RequestDataTooBig into an HTML `Bad Request (400)` and logs it at ERROR as a security event; for a
JSON API it is a client sending too much, which the client should be told plainly (as the SSE endpoints do).
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from urllib.parse import unquote

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.deprecation import MiddlewareMixin

from infra.jsonio import json_error

TIME_ZONE_COOKIE = "hc_tz"


class RequestTooBigMiddleware(MiddlewareMixin):
    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, RequestDataTooBig):
            return None
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return json_error(413, "bad_request", f"request body is larger than {limit} bytes", field="body")


def viewer_zone(request: HttpRequest) -> zoneinfo.ZoneInfo | None:
    """The IANA zone the browser reported (the admin's pages set the cookie), or None for a missing or bad one."""
    name = unquote(request.COOKIES.get(TIME_ZONE_COOKIE, ""))
    if not name or len(name) > 64:
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None


def viewer_timezone(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """Show every time of a request in the viewer's zone (Django's default, TIME_ZONE, when it is not known), so
    the admin's lists, forms and pages agree with each other and with the browser's clock."""

    def middleware(request: HttpRequest) -> HttpResponse:
        zone = viewer_zone(request)
        if zone is None:
            timezone.deactivate()
        else:
            timezone.activate(zone)
        try:
            return get_response(request)
        finally:
            timezone.deactivate()

    return middleware
