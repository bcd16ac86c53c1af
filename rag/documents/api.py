"""Staff-only JSON API of index and backfill jobs.

    POST /api/v1/rag/index-jobs               {"paths": [...], "format": "auto", "full": false} -> 201 job
    GET  /api/v1/rag/index-jobs               recent jobs
    GET  /api/v1/rag/index-jobs/<id>          the job (status, progress, counts, log)
    POST /api/v1/rag/index-jobs/<id>/cancel   -> 202 job (409 when it has finished)
    and the same under /api/v1/rag/backfill-jobs ({"limit": N} when creating).
    POST /api/v1/rag/uploads                  multipart: files (repeated), paths (their relative paths, in the
                                              same order; optional), base_url, index (default true) -> 201
                                              {"files": [...], "base_url": ..., "job": job or null}

An upload batch is all or nothing (rag.documents.services.uploads_save): one refused file is a 400 naming each
file and why, and nothing is saved. `base_url` is the uploads' base URL (each upload links to it + its path in the
uploads folder); left out, the current one stays; "" removes it.

Access: a staff session (with its CSRF token for POST), or ``Authorization: Bearer <CONCURRENCY_API_TOKEN>``
(the concurrency APIs' token) when that setting is set; anyone else gets 403 JSON, never a login redirect. Paths
must lie in CORPUS_DIR or the uploads folder: this API must not become a way to read the server's files. Bad
input is a 400 naming the field. Sync views: Django runs them on a worker thread under ASGI.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.cache import never_cache

from infra import access
from infra.jsonio import JsonInputError, json_decode, json_error
from rag.documents.models import Job, Source, SourceKind
from rag.documents.selectors import job_as_dict, job_get, jobs_recent
from rag.documents.services import (
    UploadItem,
    backfill_job_create,
    index_job_create,
    job_cancel,
    uploads_job_create,
    uploads_save,
    uploads_source_base_url_set,
)
from rag.documents.sources import FORMATS, PathNotAllowed, path_allowed
from rag.text.links import http_link

MAX_PATHS = 200
MAX_UPLOAD_FILES = 500
_TRUE, _FALSE = frozenset({"true", "1", "on", "yes"}), frozenset({"false", "0", "off", "no"})
MAX_BODY_BYTES = 64 * 1024
# A backfill limit is a count of chunks; past this it is a typo (and past 2**63 no database column holds it).
MAX_BACKFILL_LIMIT = 10**9


def _bad(exc: JsonInputError) -> JsonResponse:
    return json_error(exc.status, "bad_request", exc.message, field=exc.field)


# Index jobs read files and spend embedding calls: a staff session (CSRF-checked on writes) or the shared token.
staff_api = access.staff_api(
    access.Policy(read=access.Rule(refusal="staff session or a valid API token required", token=True))
)


def _json_body(request: HttpRequest) -> dict[str, Any]:
    data = json_decode(request.body, max_bytes=MAX_BODY_BYTES, empty={})
    if not isinstance(data, dict):
        raise JsonInputError("body", "expected a JSON object")
    return data


def _only(data: Mapping[str, Any], allowed: set[str]) -> None:
    for key in data:
        if key not in allowed:
            raise JsonInputError(str(key), f"unknown field; expected {', '.join(sorted(allowed))}")


def index_job_input_parse(data: Mapping[str, Any]) -> dict[str, Any]:
    """Checked arguments of `index_job_create` from a request body; raises JsonInputError naming the field."""
    _only(data, {"paths", "format", "full"})
    raw_paths = data.get("paths", [])
    if raw_paths is None:
        raw_paths = []
    if not isinstance(raw_paths, list) or not all(isinstance(p, str) for p in raw_paths):
        raise JsonInputError("paths", "expected a list of strings")
    if len(raw_paths) > MAX_PATHS:
        raise JsonInputError("paths", f"at most {MAX_PATHS} paths")
    paths = []
    for raw in raw_paths:
        try:
            paths.append(str(path_allowed(raw)))
        except PathNotAllowed as exc:
            raise JsonInputError("paths", str(exc)) from None
    fmt = data.get("format", "auto")
    if fmt not in FORMATS:
        raise JsonInputError("format", f"expected one of {', '.join(FORMATS)}")
    full = data.get("full", False)
    if not isinstance(full, bool):
        raise JsonInputError("full", "expected true or false")
    return {"paths": paths, "format": fmt, "full": full}


def backfill_job_input_parse(data: Mapping[str, Any]) -> dict[str, Any]:
    _only(data, {"limit"})
    limit = data.get("limit")
    if limit is not None and (
        not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_BACKFILL_LIMIT
    ):
        raise JsonInputError("limit", f"expected an integer from 1 to {MAX_BACKFILL_LIMIT}, or null")
    return {"limit": limit}


def _created(request: HttpRequest, job: Job, name: str) -> JsonResponse:
    response = JsonResponse(job_as_dict(job=job), status=201)
    response["Location"] = reverse(name, kwargs={"job_id": job.pk})
    return response


def _jobs(request: HttpRequest, kind: str) -> HttpResponse:
    if request.method == "GET":
        return JsonResponse({"jobs": [job_as_dict(job=job) for job in jobs_recent(kind=kind)]})
    if request.method != "POST":
        return json_error(405, "method_not_allowed", "use GET or POST")
    try:
        data = _json_body(request)
        if kind == "index":
            job: Job = index_job_create(**index_job_input_parse(data), created_by=request.user, created_from="api")
        else:
            arguments = backfill_job_input_parse(data)
            if not settings.LLM_BASE_URL:
                return json_error(409, "no_llm", "no LLM is configured (LLM_BASE_URL): backfill needs one")
            job = backfill_job_create(**arguments, created_by=request.user, created_from="api")
    except JsonInputError as exc:
        return _bad(exc)
    return _created(request, job, f"rag-{kind}-job")


def _detail(request: HttpRequest, kind: str, job_id: int) -> HttpResponse:
    if request.method != "GET":
        return json_error(405, "method_not_allowed", "use GET")
    job = job_get(kind=kind, job_id=job_id)
    if job is None:
        return json_error(404, "not_found", f"no {kind} job {job_id}")
    return JsonResponse(job_as_dict(job=job))


def _cancel(request: HttpRequest, kind: str, job_id: int) -> HttpResponse:
    if request.method != "POST":
        return json_error(405, "method_not_allowed", "use POST")
    job = job_get(kind=kind, job_id=job_id)
    if job is None:
        return json_error(404, "not_found", f"no {kind} job {job_id}")
    if not job_cancel(job=job):
        message = f"{kind} job {job_id} has already finished ({job.status})"
        return json_error(409, "finished", message, job=job_as_dict(job=job))
    return JsonResponse(job_as_dict(job=job), status=202)


@never_cache
@staff_api
def index_jobs(request: HttpRequest) -> HttpResponse:
    return _jobs(request, "index")


@never_cache
@staff_api
def index_job(request: HttpRequest, job_id: int) -> HttpResponse:
    return _detail(request, "index", job_id)


@never_cache
@staff_api
def index_job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    return _cancel(request, "index", job_id)


@never_cache
@staff_api
def backfill_jobs(request: HttpRequest) -> HttpResponse:
    return _jobs(request, "backfill")


@never_cache
@staff_api
def backfill_job(request: HttpRequest, job_id: int) -> HttpResponse:
    return _detail(request, "backfill", job_id)


@never_cache
@staff_api
def backfill_job_cancel(request: HttpRequest, job_id: int) -> HttpResponse:
    return _cancel(request, "backfill", job_id)


def _upload_input(request: HttpRequest) -> tuple[list[UploadItem], bool]:
    """The batch's files with their relative paths, and whether to index them; JsonInputError naming the field."""
    files = request.FILES.getlist("files")
    if not files:
        raise JsonInputError("files", "send one or more files (multipart/form-data, field 'files')")
    if len(files) > MAX_UPLOAD_FILES:
        raise JsonInputError("files", f"at most {MAX_UPLOAD_FILES} files a batch")
    paths = request.POST.getlist("paths")
    if paths and len(paths) != len(files):
        raise JsonInputError("paths", "give one relative path per file, in the files' order, or none")
    index = request.POST.get("index", "true").strip().lower()
    if index not in _TRUE | _FALSE:
        raise JsonInputError("index", "expected true or false")
    items = [
        UploadItem(name=upload.name or "", relative_path=path, chunks=upload.chunks())
        for upload, path in zip(files, paths or [""] * len(files), strict=True)
    ]
    return items, index in _TRUE


@never_cache
@staff_api
def uploads(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return json_error(405, "method_not_allowed", "use POST")
    base_url = request.POST.get("base_url")
    try:
        items, index = _upload_input(request)
        if base_url is not None and base_url.strip() and not http_link(base_url.strip()):
            raise JsonInputError("base_url", 'expected an absolute http(s) URL, or "" for none')
    except JsonInputError as exc:
        return _bad(exc)
    batch = uploads_save(items=items)
    files = [{"path": o.path, "outcome": o.outcome, "reason": o.reason} for o in batch.outcomes]
    if batch.refused:
        return json_error(400, "refused", "nothing was saved: fix or leave out the refused files", files=files)
    relink = False
    if base_url is not None:
        _, relink = uploads_source_base_url_set(base_url=base_url)
    source_base = Source.objects.filter(kind=SourceKind.UPLOADS).values_list("base_url", flat=True).first()
    job = None
    if index:
        job = uploads_job_create(saved=batch.saved, relink=relink, created_by=request.user, created_from="api")
    body = {"files": files, "base_url": source_base or "", "job": job_as_dict(job=job) if job else None}
    return JsonResponse(body, status=201)
