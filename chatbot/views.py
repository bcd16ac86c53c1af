"""HTTP views: the chat page, a client's conversations, form downloads and the forms CSV export.

Thin by design: check the request, call one selector, format the answer. The streaming endpoints are not here
but in `chatbot.consumers` (Django views cannot watch for a client going away mid-stream).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import SuspiciousFileOperation
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils._os import safe_join
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_safe

from chatbot import readiness, security
from chatbot.feedback import csv_cell
from chatbot.selectors import conversation_list, conversation_messages
from chatbot.services import TITLE_MAX_CHARS, conversation_delete, conversation_rename
from infra.jsonio import json_error
from rag.branding.selectors import organisation_get
from rag.retrieval.markdown import load_markdown_dir
from rag.text.links import http_link

logger = logging.getLogger(__name__)


def _with_client_cookie(request: HttpRequest, response: HttpResponse, client_hex: str, is_new: bool) -> HttpResponse:
    if is_new:
        security.set_client_cookie(response, client_hex, secure=request.is_secure())
    return response


@require_GET
def chat_page(request: HttpRequest) -> HttpResponse:
    _client_id, client_hex, is_new = security.client_from_request(request)
    organisation = organisation_get()
    chat_config = {
        "wsPath": "/ws/chat/",
        "ssePaths": {"responses": "/api/v1/rag/ask/stream", "chat": "/api/v1/rag/ask/stream_chat"},
        # + "<request_id>" to resume after Last-Event-ID, + "<request_id>/cancel" to stop (both transports).
        "streamPath": "/api/v1/rag/ask/stream/",
        "feedbackPath": "/api/v1/rag/feedback",
        "conversationsPath": reverse("conversation-list"),
        "maxQuestionChars": settings.RAG_MAX_QUESTION_CHARS,
        "defaultLanguage": settings.RAG_DEFAULT_LANGUAGE,
        "organisation": organisation.page_config(),
    }
    context = {
        "chat_config": chat_config,
        "max_question_chars": settings.RAG_MAX_QUESTION_CHARS,
        "organisation": organisation,
    }
    return _with_client_cookie(request, render(request, "chat/index.html", context), client_hex, is_new)


FAVICON = Path(settings.BASE_DIR) / "static" / "favicon.svg"


@require_safe
def favicon(request: HttpRequest) -> HttpResponse:
    """`/favicon.ico`, which browsers ask for on pages that name no icon (the JSON APIs, the admin's 404s)."""
    response = HttpResponse(FAVICON.read_bytes(), content_type="image/svg+xml")
    response["Cache-Control"] = "public, max-age=86400"
    return response


@require_GET
def health(request: HttpRequest) -> JsonResponse:
    # The `ask` command probes this to tell our server from anything else listening on ASK_SERVER_URL.
    return JsonResponse({"status": "ok", "service": "helpcentre-chatbot"})


@require_GET
async def ready(request: HttpRequest) -> JsonResponse:
    """200 when this worker can serve a question end to end; 503 naming each part that cannot."""
    checks = await readiness.readiness()
    failing = [name for name, check in checks.items() if not check.ok]
    body: dict[str, Any] = {
        "status": "not_ready" if failing else "ready",
        "checks": {name: check.as_dict() for name, check in checks.items()},
    }
    if not failing:
        return JsonResponse(body)
    message = "; ".join(f"{name}: {checks[name].detail}" for name in failing)
    body["error"] = {"code": "not_ready", "message": message, "failing": failing}
    response = JsonResponse(body, status=503)
    response["Retry-After"] = "1"
    return response


@require_GET
def conversation_list_api(request: HttpRequest) -> HttpResponse:
    client_id, client_hex, is_new = security.client_from_request(request)
    conversations = [] if is_new else conversation_list(client_id=client_id)
    return _with_client_cookie(request, JsonResponse({"conversations": conversations}), client_hex, is_new)


# CSRF: PATCH and DELETE are not requests a cross-site form can send, and a cross-site script can only send them
# after a CORS preflight this server never answers (PATCH must also declare a JSON body, as the feedback API).
@csrf_exempt
@require_http_methods(["GET", "PATCH", "DELETE"])
def conversation_detail_api(request: HttpRequest, conversation_id: uuid.UUID) -> HttpResponse:
    client_id, _client_hex, _is_new = security.client_from_request(request)
    # Someone else's conversation looks exactly like a missing one, so ids cannot be probed.
    not_found = json_error(404, "not_found", f"unknown conversation {conversation_id}")
    if request.method == "DELETE":
        return (
            HttpResponse(status=204)
            if conversation_delete(conversation_id=conversation_id, client_id=client_id)
            else not_found
        )
    if request.method == "PATCH":
        return _conversation_rename(request, conversation_id, client_id) or not_found
    messages = conversation_messages(conversation_id=str(conversation_id), client_id=client_id)
    if messages is None:
        return not_found
    return JsonResponse({"id": str(conversation_id), "messages": messages})


def _conversation_rename(request: HttpRequest, conversation_id: uuid.UUID, client_id: str) -> HttpResponse | None:
    """`PATCH {"title": "..."}`: 200 with the new title, 400/415 naming what was wrong, None when not found."""
    try:
        security.require_json_content_type([(b"content-type", request.META.get("CONTENT_TYPE", "").encode("latin-1"))])
    except security.UnsupportedContentType as exc:
        return json_error(415, "bad_request", str(exc))
    try:
        payload = json.loads(request.body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return json_error(400, "bad_request", "request body is not valid JSON")
    title = payload.get("title") if isinstance(payload, dict) else None
    if not isinstance(title, str) or not title.strip():
        return json_error(400, "bad_request", "title must be a non-empty string")
    title = " ".join(title.split())
    if len(title) > TITLE_MAX_CHARS:
        return json_error(400, "bad_request", f"title must be at most {TITLE_MAX_CHARS} characters")
    if not conversation_rename(conversation_id=conversation_id, client_id=client_id, title=title):
        return None
    return JsonResponse({"id": str(conversation_id), "title": title})


# --- forms ---------------------------------------------------------------------------------------------------


def _forms_dir() -> Path:
    return Path(settings.CORPUS_DIR) / "forms"


@require_safe
def form_download(request: HttpRequest, name: str) -> FileResponse:
    root = _forms_dir().resolve()
    if any(part.startswith(".") for part in Path(name).parts):
        raise Http404("no such form")  # hidden files and `..` are never forms
    try:
        candidate = Path(safe_join(root, name)).resolve()
    except SuspiciousFileOperation:
        raise Http404("no such form") from None
    # resolve() follows symlinks: a link inside forms/ pointing elsewhere is refused as well.
    if not candidate.is_relative_to(root) or not candidate.is_file():
        raise Http404("no such form")
    # FileResponse streams the file and sets Content-Type from the name, Content-Length and the file name.
    return FileResponse(candidate.open("rb"), as_attachment=True, filename=candidate.name)


@dataclass(frozen=True, slots=True)
class FormInfo:
    form_id: str
    title: str
    url: str
    form_file: str  # the file's path inside the corpus, e.g. "forms/f.pdf"
    language: str

    @property
    def download_name(self) -> str:
        """The path under /forms/ (which serves CORPUS_DIR/forms)."""
        return self.form_file.removeprefix("forms/")


_catalogue_lock = threading.Lock()
_catalogue: tuple[Any, list[FormInfo]] | None = None


def _corpus_signature(corpus: Path) -> tuple[Any, ...]:
    """Cheap fingerprint of the corpus (names, sizes, mtimes): an edited document refreshes the cache."""
    files = sorted(corpus.rglob("*.md")) if corpus.is_dir() else []
    return (str(corpus), *((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files))


def form_catalogue() -> list[FormInfo]:
    """The downloadable forms described in the corpus' front matter, parsed once per corpus change.

    Blocking (reads files): called from sync views, which Django runs in a worker thread under ASGI.
    """
    global _catalogue
    corpus = Path(settings.CORPUS_DIR)
    signature = _corpus_signature(corpus)
    with _catalogue_lock:
        if _catalogue is not None and _catalogue[0] == signature:
            return _catalogue[1]
        documents = load_markdown_dir(corpus)
        forms = sorted(
            (
                FormInfo(d.form_id, d.title, d.url, d.form_file, d.language)
                for d in documents
                if d.kind == "form" and d.form_id
            ),
            key=lambda f: (f.form_id, f.language),
        )
        _catalogue = (signature, forms)
        return forms


def _one_per_form(forms: list[FormInfo], language: str) -> list[FormInfo]:
    """One row per form: its document in `language` when there is one, else the first language it exists in."""
    chosen: dict[str, FormInfo] = {}
    for form in forms:
        current = chosen.get(form.form_id)
        if current is None or (form.language == language and current.language != language):
            chosen[form.form_id] = form
    return sorted(chosen.values(), key=lambda f: f.form_id)


@require_safe
def forms_export_csv(request: HttpRequest) -> HttpResponse:
    """`?ids=F-101,F-102` (unknown ids ignored; none: every form); `?lang=en` picks the titles' language."""
    wanted = {part.strip().upper() for part in request.GET.get("ids", "").split(",") if part.strip()}
    language = request.GET.get("lang", "").strip() or settings.RAG_DEFAULT_LANGUAGE
    forms = [form for form in form_catalogue() if not wanted or form.form_id.upper() in wanted]
    rows = _one_per_form(forms, language)
    buffer = io.StringIO()
    # The BOM makes Excel read the file as UTF-8 (Chinese titles) instead of the local code page.
    buffer.write("\ufeff")
    writer = csv.writer(buffer)
    writer.writerow(["form_id", "title", "url", "download_url"])
    for form in rows:
        download_url = (
            request.build_absolute_uri(reverse("form-download", args=[form.download_name])) if form.form_file else ""
        )
        # every cell guarded (CSV injection), the links http(s) only
        cells = [form.form_id, form.title, http_link(form.url), download_url]
        writer.writerow([csv_cell(cell) for cell in cells])
    response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="forms.csv"'
    return response
