"""A request body past Django's DATA_UPLOAD_MAX_MEMORY_SIZE is a 413 in the one JSON error shape.

Django turns RequestDataTooBig into an HTML `Bad Request (400)` and logs it at ERROR as a security event; for a
JSON API it is a client sending too much, which the client should be told plainly (as the SSE endpoints do).
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.utils.deprecation import MiddlewareMixin

from concurrency.jsonio import json_error


class RequestTooBigMiddleware(MiddlewareMixin):
    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, RequestDataTooBig):
            return None
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return json_error(413, "bad_request", f"request body is larger than {limit} bytes", field="body")
