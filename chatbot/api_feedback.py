"""`POST /api/v1/rag/feedback`: a client's verdict on one of its answers.

    {"request_id": "...", "score": "up" | "down" | 1..5, "comment": "..."}     ("trace_id" may replace request_id)

201 when recorded, 200 when it replaced the client's earlier verdict on that answer, 400 naming the bad field,
404 when the id is not one of this client's answers (the same for someone else's, so ids cannot be probed),
415 for a body not declared JSON.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from chatbot import security
from chatbot.feedback import FeedbackInputError, FeedbackTargetNotFound, feedback_input_parse, feedback_record
from infra.jsonio import JsonInputError, json_decode, json_error

# A verdict and a comment of a few thousand characters; anything far beyond is not feedback.
MAX_BODY_BYTES = 64 * 1024


def _error(status: int, code: str, message: str, field: str | None = None) -> JsonResponse:
    return json_error(status, code, message, **({} if field is None else {"field": field}))


# CSRF: like the streaming endpoints, the body must be declared application/json, which a cross-site page can
# only send after a CORS preflight this server never answers; the client id cookie alone cannot be replayed.
@csrf_exempt
@require_POST
def feedback_api(request: HttpRequest) -> HttpResponse:
    try:
        security.require_json_content_type([(b"content-type", request.META.get("CONTENT_TYPE", "").encode("latin-1"))])
    except security.UnsupportedContentType as exc:
        return _error(415, "bad_request", str(exc))
    client_id, _client_hex, is_new = security.client_from_request(request)
    try:
        payload = json_decode(request.body, max_bytes=MAX_BODY_BYTES)
    except JsonInputError as exc:
        return _error(exc.status, "bad_request", exc.message, exc.field)
    try:
        data = feedback_input_parse(payload)
    except FeedbackInputError as exc:
        return _error(400, "bad_request", exc.message, exc.field)
    if is_new:
        # A client without an id has no answers yet: nothing to look up.
        return _error(404, "not_found", "unknown request_id" if data.request_id else "unknown trace_id")
    try:
        feedback, created = feedback_record(client_id=client_id, data=data)
    except FeedbackTargetNotFound:
        return _error(404, "not_found", "unknown request_id" if data.request_id else "unknown trace_id")
    body = {
        "feedback": {
            "request_id": feedback.request_id,
            "trace_id": feedback.trace_id,
            "kind": feedback.kind,
            "score": feedback.score,
            "comment": feedback.comment,
            "created": created,
        }
    }
    return JsonResponse(body, status=201 if created else 200)


# Included by chatbot.urls at `api/v1/rag/feedback` (the route and its view stay together here).
urlpatterns = [path("", feedback_api, name="feedback")]
