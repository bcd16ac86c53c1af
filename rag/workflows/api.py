"""JSON APIs of the graph builder: node catalogue, validation, drafts and versions, publishing, and test-runs.

Thin views: parse and check the request, call one service or selector, format the answer. Sync views on
purpose (under ASGI Django runs them in a worker thread, so the ORM never blocks the event loop); the test-run
is async because it streams a pipeline run, which lives on the event loop. Errors are
`{"error": {"code", "message", ["problems"]}}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, StreamingHttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from infra.jsonio import JsonInputError, json_decode, json_error
from prompts.models import Prompt
from rag.engine import WorkflowError
from rag.events import SOURCE, TERMINAL_CHANNELS, Event
from rag.provider import get_runtime
from rag.questions import question_too_long
from rag.runtime import BACKENDS, AskRequest, PipelineRun
from rag.workflows import selectors, services
from rag.workflows.access import staff_api
from rag.workflows.checks import (
    PublishBlocked,
    prompt_check_detail,
    prompt_version_check,
    publish_check_detail,
    publish_tests_count,
    workflow_draft_check,
)
from rag.workflows.graphs import GraphShapeError, graph_check, graph_clean, node_catalogue
from rag.workflows.models import PromptCheck, PublishCheck, WorkflowDraft, WorkflowDraftVersion

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 512 * 1024


# Ids and version numbers fit a database integer column; a bigger one is an OverflowError in the lookup.
MAX_ID = 2**31 - 1


class BadRequest(ValueError):
    pass


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_ID


def _json_body(request: HttpRequest) -> dict[str, Any]:
    payload = json_decode(request.body, max_bytes=MAX_BODY_BYTES, empty={})
    if not isinstance(payload, dict):
        raise BadRequest("request body must be a JSON object")
    return payload


def _int_field(payload: dict[str, Any], name: str, *, required: bool = True) -> int | None:
    value = payload.get(name)
    if value is None and not required:
        return None
    if not _is_id(value):
        raise BadRequest(f"'{name}' must be an integer from 0 to {MAX_ID}")
    return value


def _handled(view: Any) -> Any:
    """Map the services' exceptions to their HTTP answers, in one place."""

    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except BadRequest as exc:
            return json_error(400, "bad_request", str(exc))
        except JsonInputError as exc:
            return json_error(exc.status, "bad_request", exc.message, field=exc.field)
        except GraphShapeError as exc:
            return json_error(400, "bad_graph", str(exc))
        except ValidationError as exc:
            return json_error(400, "invalid", " ".join(exc.messages))
        except (WorkflowDraft.DoesNotExist, WorkflowDraftVersion.DoesNotExist) as exc:
            return json_error(404, "not_found", str(exc))
        except services.DraftConflict as exc:
            return json_error(409, "conflict", str(exc))
        except services.PublishRefused as exc:
            return json_error(400, "invalid_workflow", str(exc), problems=exc.problems)
        except PublishBlocked as exc:
            # what the builder's publish dialog shows: the version's results beside production's, per test
            check = publish_check_detail(exc.check) if exc.check is not None else None
            return json_error(409, "tests_failed", str(exc), check=check, tests=publish_tests_count())

    wrapped.__name__ = view.__name__
    wrapped.__doc__ = view.__doc__
    return wrapped


# --- catalogue and validation ----------------------------------------------------------------------------------


@never_cache
@staff_api()
@require_GET
def nodes(request: HttpRequest) -> HttpResponse:
    """Every node type (descriptions in English and Traditional Chinese, inputs, outputs, routes, parameters),
    every route name, and the END pseudo-node."""
    return JsonResponse(node_catalogue())


@never_cache
@staff_api()
@require_POST
@_handled
def validate(request: HttpRequest) -> HttpResponse:
    """The engine's verdict on an unsaved graph: `{"valid", "problems": [{"code", "message", "node"}]}`."""
    graph = graph_clean(_json_body(request).get("graph"))
    check = graph_check(graph)
    return JsonResponse({"valid": check.valid, "problems": check.problems})


# --- drafts ----------------------------------------------------------------------------------------------------


@never_cache
@staff_api()
@require_GET
def default_workflow(request: HttpRequest) -> HttpResponse:
    return JsonResponse(selectors.workflow_default_detail())


@never_cache
@staff_api(change=True)
@require_http_methods(["GET", "POST"])
@_handled
def drafts(request: HttpRequest) -> HttpResponse:
    """GET: every draft (the built-in default first). POST `{"name", "graph"?, "copy_default"?, "note"?}`."""
    if request.method == "GET":
        return JsonResponse({"drafts": selectors.workflow_draft_list()})
    payload = _json_body(request)
    if payload.get("copy_default"):
        draft = services.workflow_draft_copy_default(name=payload.get("name"), user=request.user)
    else:
        draft = services.workflow_draft_create(
            name=payload.get("name"), graph=payload.get("graph"), user=request.user, note=str(payload.get("note", ""))
        )
    return JsonResponse(selectors.workflow_draft_detail(draft), status=201)


@never_cache
@staff_api(change=True)
@require_http_methods(["GET", "POST"])
@_handled
def draft(request: HttpRequest, draft_id: int) -> HttpResponse:
    """GET: the draft with its graph and problems. POST `{"graph", "note"?, "expected_version"?}`: save a new
    version (archived); 409 when someone else saved since `expected_version`."""
    if request.method == "GET":
        return JsonResponse(selectors.workflow_draft_detail(selectors.workflow_draft_get(draft_id=draft_id)))
    payload = _json_body(request)
    saved = services.workflow_draft_save(
        draft_id=draft_id,
        graph=payload.get("graph"),
        user=request.user,
        note=str(payload.get("note", "")),
        expected_version=_int_field(payload, "expected_version", required=False),
    )
    return JsonResponse(selectors.workflow_draft_detail(saved))


@never_cache
@staff_api()
@require_GET
@_handled
def draft_versions(request: HttpRequest, draft_id: int) -> HttpResponse:
    selectors.workflow_draft_get(draft_id=draft_id)  # 404 for an unknown draft rather than an empty list
    return JsonResponse({"versions": selectors.workflow_draft_versions(draft_id=draft_id)})


@never_cache
@staff_api()
@require_GET
@_handled
def draft_version(request: HttpRequest, draft_id: int, version: int) -> HttpResponse:
    row = selectors.workflow_draft_version_get(draft_id=draft_id, version=version)
    return JsonResponse({"version": row.version, "graph": row.graph, "note": row.note, "valid": row.valid})


@never_cache
@staff_api()
@require_GET
@_handled
def draft_diff(request: HttpRequest, draft_id: int) -> HttpResponse:
    """`?a=<version>&b=<version>` (b left out: the draft as saved now)."""
    try:
        old = int(request.GET["a"])
        new = int(request.GET["b"]) if request.GET.get("b") else None
    except (KeyError, ValueError):
        old, new = -1, None
    if not _is_id(old) or (new is not None and not _is_id(new)):
        raise BadRequest("'a' (and optionally 'b') must be version numbers")
    return JsonResponse(selectors.workflow_draft_diff(draft_id=draft_id, old_version=old, new_version=new))


@never_cache
@staff_api(change=True)
@require_POST
@_handled
def draft_validate(request: HttpRequest, draft_id: int) -> HttpResponse:
    return JsonResponse(selectors.workflow_draft_detail(services.workflow_draft_validate(draft_id=draft_id)))


@never_cache
@staff_api(change=True)
@require_POST
@_handled
def draft_restore(request: HttpRequest, draft_id: int) -> HttpResponse:
    """`{"version"}`: that version's graph, unchanged, becomes the draft's next version."""
    version = _int_field(_json_body(request), "version")
    assert version is not None
    restored = services.workflow_draft_restore(draft_id=draft_id, version=version, user=request.user)
    return JsonResponse(selectors.workflow_draft_detail(restored))


@never_cache
@staff_api(change=True)
@require_POST
@_handled
def draft_publish(request: HttpRequest, draft_id: int) -> HttpResponse:
    """`{"backend": "chat"|"responses", "override_reason"?}`: 400 with the problems when the saved graph cannot run;
    409 `tests_failed` when the version fails test-set questions production passes (or was not checked) and no
    override reason is given."""
    body = _json_body(request)
    backend = body.get("backend")
    reason = body.get("override_reason") or ""
    if not isinstance(reason, str):
        raise BadRequest(f"'override_reason' must be a string, not {type(reason).__name__}")
    published = services.workflow_draft_publish(
        draft_id=draft_id, backend=backend, user=request.user, override_reason=reason
    )
    return JsonResponse(selectors.workflow_draft_detail(published))


@never_cache
@staff_api(change=True)
@require_POST
@_handled
def draft_unpublish(request: HttpRequest, draft_id: int) -> HttpResponse:
    return JsonResponse(selectors.workflow_draft_detail(services.workflow_draft_unpublish(draft_id=draft_id)))


# --- test-run --------------------------------------------------------------------------------------------------


def _sse_frame(event: Event) -> bytes:
    # The chat transports' framing (chatbot.consumers.sse): `id: <seq>` and one compact UTF-8 JSON line.
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"id: {event['seq']}\ndata: {data}\n\n".encode()


def _test_run_parse(payload: dict[str, Any]) -> tuple[str, str, Any, Any]:
    question = payload.get("question")
    if not isinstance(question, str) or not question.strip():
        raise BadRequest("'question' must be a non-empty string")
    if too_long := question_too_long(question):
        raise BadRequest(too_long)
    backend = payload.get("backend") or "chat"
    if backend not in BACKENDS:
        raise BadRequest(f"'backend' must be one of {', '.join(BACKENDS)}, not {backend!r}")
    graph, draft_id = payload.get("graph"), payload.get("draft_id")
    if (graph is None) == (draft_id is None):
        raise BadRequest("send either 'graph' or 'draft_id'")
    return question, backend, graph, draft_id


def _draft_graph(draft_id: Any) -> dict[str, Any]:
    if draft_id == selectors.DEFAULT_DRAFT_ID:
        return selectors.workflow_default_detail()["graph"]
    if not _is_id(draft_id):
        raise BadRequest("'draft_id' must be a draft's id or 'default'")
    return selectors.workflow_draft_get(draft_id=draft_id).graph


async def _event_frames(run: PipelineRun) -> AsyncGenerator[bytes, None]:
    """The run's events as SSE frames, ending with exactly one terminal; a client going away cancels the run."""
    last_seq = 0
    ended = False
    try:
        async with contextlib.aclosing(run.events()) as events:
            async for event in events:
                last_seq = event["seq"]
                yield _sse_frame(event)
                if event["channel"] in TERMINAL_CHANNELS:
                    ended = True
                    return
    except Exception as exc:
        # The stream broke off (no event within the idle timeout, say): it still ends with one terminal event.
        logger.warning("test-run %s broke off: %r", run.state.request_id, exc)
        ended = True
        yield _sse_frame(
            {
                "source": SOURCE,
                "request_id": run.state.request_id,
                "seq": last_seq + 1,
                "node": "transport",
                "channel": "error",
                "stage": "error",
                "code": "internal",
                "message": f"internal error ({type(exc).__name__})",
            }
        )
    finally:
        if not ended:
            run.cancel("the client went away")


@never_cache
@staff_api()
async def test_run(request: HttpRequest) -> HttpResponseBase:
    """`{"graph": {...} | "draft_id", "question", "backend"}`: validate and compile through the runtime's own
    engine and cache, run the graph on the question, stream its events as SSE in the chat schema.
    Invalid graph: 400 with the problems."""
    if request.method != "POST":
        return json_error(405, "bad_request", "use POST")
    try:
        question, backend, graph, draft_id = _test_run_parse(_json_body(request))
        if graph is None:
            graph = await sync_to_async(_draft_graph)(draft_id)
        graph = graph_clean(graph)
    except BadRequest as exc:
        return json_error(400, "bad_request", str(exc))
    except GraphShapeError as exc:
        return json_error(400, "bad_graph", str(exc))
    except WorkflowDraft.DoesNotExist:
        return json_error(404, "not_found", f"no draft {draft_id}")

    runtime = get_runtime()
    # Building a dozen nodes for the trial compile is small but not free: off the loop.
    check = await asyncio.to_thread(graph_check, graph, registry=runtime.registry)
    if not check.valid or check.definition is None:
        return json_error(400, "invalid_workflow", "the workflow cannot run", problems=check.problems)
    user = await request.auser()
    ask = AskRequest(question=question, backend=backend, client_id=f"staff:{user.pk}")
    try:
        run = await runtime.start(ask, workflow=check.definition)
    except WorkflowError as exc:
        return json_error(400, "invalid_workflow", str(exc), problems=[p.as_dict() for p in exc.problems])
    response = StreamingHttpResponse(_event_frames(run), content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx would otherwise buffer the whole run
    response["X-Request-Id"] = run.state.request_id
    return response


@never_cache
@staff_api(change=True)
async def draft_check(request: HttpRequest, draft_id: int) -> HttpResponse:
    """`POST {"backend"}`: run the test set against the draft's saved version and production; the check's pass and
    fail beside production's, per question. `GET`: the draft's checks, newest first."""
    if request.method == "GET":
        checks = [publish_check_detail(c) async for c in PublishCheck.objects.filter(draft_id=draft_id)[:20]]
        return JsonResponse({"checks": checks, "tests": await sync_to_async(publish_tests_count)()})
    if request.method != "POST":
        return json_error(405, "bad_request", "use GET or POST")
    try:
        backend = (await sync_to_async(_json_body)(request)).get("backend") or "chat"
    except (BadRequest, JsonInputError) as exc:
        return json_error(400, "bad_request", str(exc))
    if backend not in ("chat", "responses"):
        return json_error(400, "bad_request", f"'backend' must be chat or responses, not {backend!r}")
    try:
        check = await workflow_draft_check(runtime=get_runtime(), draft_id=draft_id, backend=backend)
    except WorkflowDraft.DoesNotExist:
        return json_error(404, "not_found", f"no draft {draft_id}")
    return JsonResponse(publish_check_detail(check))


async def _check_backend(request: HttpRequest) -> str:
    backend = (await sync_to_async(_json_body)(request)).get("backend") or "chat"
    if backend not in BACKENDS:
        raise BadRequest(f"'backend' must be one of {', '.join(BACKENDS)}, not {backend!r}")
    return str(backend)


@never_cache
@staff_api(change=True)
async def prompt_check(request: HttpRequest, name: str, version: int) -> HttpResponse:
    """`POST {"backend"}`: run the test set with version `version` of prompt `name` beside the production prompts
    (what giving it the production label asks first); per question, its pass and fail beside production's.
    `GET`: that version's checks, newest first."""
    if request.method == "GET":
        rows = PromptCheck.objects.filter(prompt_name=name, prompt_version=version)[:20]
        checks = [prompt_check_detail(c) async for c in rows]
        return JsonResponse({"checks": checks, "tests": await sync_to_async(publish_tests_count)()})
    if request.method != "POST":
        return json_error(405, "bad_request", "use GET or POST")
    try:
        backend = await _check_backend(request)
    except (BadRequest, JsonInputError) as exc:
        return json_error(400, "bad_request", str(exc))
    try:
        check = await prompt_version_check(runtime=get_runtime(), name=name, version=version, backend=backend)
    except Prompt.DoesNotExist:
        return json_error(404, "not_found", f"prompt {name!r} has no version {version}")
    return JsonResponse(prompt_check_detail(check))
