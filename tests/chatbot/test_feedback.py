"""POST /api/v1/rag/feedback, the feedback admin and its CSV export, and the score sent to telemetry."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from chatbot import feedback as feedback_module
from chatbot import streaming
from chatbot.models import Conversation, Feedback, Message
from rag.deps import PipelineDeps
from rag.nodes import build_registry
from rag.runtime import PipelineRuntime
from rag.telemetry import Telemetry, trace_id_for
from rag.telemetry.langfuse_export import TRACE_NAME, LangfuseExporter
from rag.workflows.default import default_workflow
from tests.rag.nodes.support import InMemoryRetriever
from tests.rag.telemetry.capture import CaptureServer
from tests.rag.telemetry.support import FakeExporter

pytestmark = pytest.mark.django_db

URL = "/api/v1/rag/feedback"
ALICE = uuid.uuid4().hex
BOB = uuid.uuid4().hex


def exchange(
    client_hex: str,
    request_id: str,
    answer: str = "請到登入頁點選「忘記密碼」。",
    question: str = "如何重設密碼？",
    **fields: Any,
) -> Message:
    conversation = Conversation.objects.create(client_id=f"anon:{client_hex}", title=question)
    Message.objects.create(conversation=conversation, role="user", content=question, request_id=request_id)
    return Message.objects.create(
        conversation=conversation,
        role="assistant",
        content=answer,
        request_id=request_id,
        trace_id=fields.pop("trace_id", trace_id_for(request_id)),
        intent="simple_faq",
        language="zh-hant",
        usage={"input_tokens": 10, "output_tokens": 20, "total_tokens": 30},
        latency_ms=850,
        **fields,
    )


def post(client: Client, payload: Any, *, client_hex: str | None = ALICE, content_type: str = "application/json"):
    headers: dict[str, Any] = {"HTTP_X_CLIENT_ID": client_hex} if client_hex else {}
    body = payload if isinstance(payload, str | bytes) else json.dumps(payload)
    return client.post(URL, body, content_type=content_type, **headers)


@pytest.fixture
def answer() -> Message:
    return exchange(ALICE, "req-a1")


def test_a_thumbs_up_is_stored(client: Client, answer: Message) -> None:
    response = post(client, {"request_id": "req-a1", "score": "up"})

    assert response.status_code == 201
    assert response.json()["feedback"] == {
        "request_id": "req-a1",
        "trace_id": trace_id_for("req-a1"),
        "kind": "thumbs",
        "score": 1,
        "comment": "",
        "created": True,
    }
    stored = Feedback.objects.get()
    assert (stored.message, stored.kind, stored.score, stored.client_id) == (answer, "thumbs", 1, f"anon:{ALICE}")


def test_a_second_verdict_replaces_the_first(client: Client, answer: Message) -> None:
    post(client, {"request_id": "req-a1", "score": "down"})
    response = post(client, {"request_id": "req-a1", "score": 4, "comment": "  clear, but long  "})

    assert response.status_code == 200 and response.json()["feedback"]["created"] is False
    stored = Feedback.objects.get()
    assert (stored.kind, stored.score, stored.comment) == ("rating", 4, "clear, but long")


def test_the_trace_id_may_name_the_answer(client: Client, answer: Message) -> None:
    response = post(client, {"trace_id": trace_id_for("req-a1"), "score": "down", "comment": "wrong form"})
    assert response.status_code == 201
    assert Feedback.objects.get().message == answer


def test_a_verdict_costs_a_bounded_number_of_queries(client: Client, answer: Message, django_assert_max_num_queries):
    # One read of the exchange, one of an earlier verdict, one write, and update_or_create's savepoints.
    with django_assert_max_num_queries(7):
        assert post(client, {"request_id": "req-a1", "score": "up"}).status_code == 201


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"request_id": "req-a1"}, "score"),
        ({"request_id": "req-a1", "score": "meh"}, "score"),
        ({"request_id": "req-a1", "score": 0}, "score"),
        ({"request_id": "req-a1", "score": 6}, "score"),
        ({"request_id": "req-a1", "score": 3.5}, "score"),
        ({"request_id": "req-a1", "score": True}, "score"),
        ({"request_id": "req-a1", "score": "up", "comment": "x" * 2001}, "comment"),
        ({"request_id": "req-a1", "score": "up", "comment": 5}, "comment"),
        ({"request_id": 12, "score": "up"}, "request_id"),
        ({"request_id": "r" * 65, "score": "up"}, "request_id"),
        ({"trace_id": ["a"], "score": "up"}, "trace_id"),
        ({"score": "up"}, "request_id"),
        (["req-a1", "up"], "body"),
        ("{not json", "body"),
        ({"request_id": "req-a1", "score": "up", "comment": "x\ud800y"}, "comment"),
        ({"request_id": "req-a1", "score": "up", "comment": "x\x00y"}, "comment"),
        ({"request_id": "req-a\udfff", "score": "up"}, "request_id"),
    ],
)
def test_bad_input_is_refused_naming_the_field(client: Client, answer: Message, payload: Any, field: str) -> None:
    response = post(client, payload)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("bad_request", field)
    assert not Feedback.objects.exists()


def test_a_body_past_the_upload_limit_is_a_413_in_the_json_error_shape(
    client: Client, answer: Message, caplog: pytest.LogCaptureFixture
) -> None:
    body = json.dumps({"request_id": "req-a1", "score": "up", "comment": "x" * (20 * 1024 * 1024)})
    with caplog.at_level("ERROR"):
        response = post(client, body)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "bad_request" and "larger than" in response.json()["error"]["message"]
    assert not [record for record in caplog.records if record.levelname == "ERROR"]
    assert not Feedback.objects.exists()


def test_a_body_past_the_feedback_limit_is_a_413(client: Client, answer: Message) -> None:
    response = post(client, {"request_id": "req-a1", "score": "up", "pad": "x" * 70_000})
    assert response.status_code == 413 and response.json()["error"]["field"] == "body"


def test_a_comment_of_exactly_the_limit_is_accepted(client: Client, answer: Message) -> None:
    assert post(client, {"request_id": "req-a1", "score": "up", "comment": "字" * 2000}).status_code == 201


def test_a_body_not_declared_json_is_refused(client: Client, answer: Message) -> None:
    response = post(client, "request_id=req-a1&score=up", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415


@pytest.mark.parametrize(
    ("payload", "client_hex"),
    [
        ({"request_id": "req-b1", "score": "up"}, ALICE),  # Bob's answer
        ({"trace_id": trace_id_for("req-b1"), "score": "up"}, ALICE),
        ({"request_id": "req-a1", "trace_id": trace_id_for("req-b1"), "score": "up"}, ALICE),  # ids that disagree
        ({"request_id": "req-nope", "score": "up"}, ALICE),
        ({"request_id": "req-a1", "score": "up"}, None),  # no client id: a new client has no answers
    ],
)
def test_an_answer_that_is_not_the_clients_own_is_not_found(client: Client, answer: Message, payload, client_hex):
    exchange(BOB, "req-b1")
    response = post(client, payload, client_hex=client_hex)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert not Feedback.objects.exists()


def test_only_post_is_allowed(client: Client) -> None:
    assert client.get(URL).status_code == 405


# --- telemetry ------------------------------------------------------------------------------------------------


@pytest.fixture
def telemetry(monkeypatch: pytest.MonkeyPatch) -> tuple[Telemetry, FakeExporter]:
    exporter = FakeExporter()
    # Nothing sampled, nothing in this worker's memory: the trace must be created from the stored messages.
    telemetry = Telemetry(sample_rate=0.0, exporter=exporter)
    monkeypatch.setattr(feedback_module, "get_telemetry", lambda: telemetry)
    return telemetry, exporter


def test_the_verdict_is_sent_as_a_score_after_commit_with_the_trace_to_create(
    client: Client, answer: Message, telemetry, django_capture_on_commit_callbacks
) -> None:
    _telemetry, exporter = telemetry
    with django_capture_on_commit_callbacks(execute=True):
        post(client, {"request_id": "req-a1", "score": "down", "comment": "outdated"})

    [(score, trace)] = exporter.scores
    assert (score.trace_id, score.name, score.value, score.data_type) == (
        trace_id_for("req-a1"),
        "user_feedback",
        0.0,
        "BOOLEAN",
    )
    assert score.comment == "outdated"
    assert trace is not None and trace.rebuilt_from == "messages"
    assert (trace.trace_id, trace.question) == (score.trace_id, "如何重設密碼？")
    assert trace.answer_chars == len(answer.content)
    assert (trace.latency_ms, trace.usage, trace.intent) == (850.0, (10, 20, 30), "simple_faq")


def test_an_updated_verdict_overwrites_the_same_score(
    client: Client, answer: Message, telemetry, django_capture_on_commit_callbacks
) -> None:
    _telemetry, exporter = telemetry
    with django_capture_on_commit_callbacks(execute=True):
        post(client, {"request_id": "req-a1", "score": "down"})
        post(client, {"request_id": "req-a1", "score": 5})
    first, second = (score for score, _trace in exporter.scores)
    assert first.score_id == second.score_id
    assert (second.name, second.value, second.data_type) == ("user_rating", 5.0, "NUMERIC")


def test_without_telemetry_nothing_is_sent(client: Client, answer: Message, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert post(client, {"request_id": "req-a1", "score": "up"}).status_code == 201
    assert len(callbacks) == 1  # ran, and found telemetry off (the test settings have no Langfuse keys)


# --- telemetry, end to end: an answer recorded by a chat exchange, the real SDK, a capture server on loopback ------


class Worker:
    """One server process as far as telemetry goes: its own Telemetry (real SDK, exporting to `server`) and an
    offline pipeline runtime that uses it."""

    def __init__(self, server: CaptureServer, *, sample_rate: float, **exporter_options: Any) -> None:
        exporter = LangfuseExporter(
            public_key=f"pk-lf-feedback-{uuid.uuid4().hex[:8]}",
            secret_key="sk-lf-feedback",
            host=server.url,
            flush_interval=0.1,
            **exporter_options,
        )
        self.telemetry = Telemetry(sample_rate=sample_rate, exporter=exporter)
        deps = PipelineDeps(retriever=InMemoryRetriever(), telemetry=self.telemetry)
        self.runtime = PipelineRuntime(
            registry=build_registry(), deps_factory=lambda: deps, default_workflow=default_workflow()
        )

    async def answer(self, monkeypatch: pytest.MonkeyPatch, question: str = "如何重設密碼？") -> Message:
        """Ask as client ALICE through a chat exchange; the stored answer."""
        monkeypatch.setattr(streaming, "get_runtime", lambda: self.runtime)
        ask = streaming.ask_input_parse({"question": question}, backend="chat", client_id=f"anon:{ALICE}")
        exchange = await streaming.exchange_open(ask)
        events = [event async for event in exchange.events()]
        assert events[-1]["channel"] == "meta_summary"
        await streaming.pending_records()
        return await Message.objects.aget(request_id=exchange.request_id, role=Message.Role.ASSISTANT)

    async def feedback(self, monkeypatch: pytest.MonkeyPatch, client: Client, request_id: str) -> None:
        """POST a thumbs-down to this worker, and wait until what it queued has left."""
        monkeypatch.setattr(feedback_module, "get_telemetry", lambda: self.telemetry)
        response = await sync_to_async(post)(client, {"request_id": request_id, "score": "down"})
        assert response.status_code == 201
        assert await asyncio.to_thread(self.telemetry.flush, 5)


@pytest.fixture
def capture_server() -> Iterator[CaptureServer]:
    with CaptureServer() as server:
        yield server


@pytest.fixture
def workers(capture_server: CaptureServer) -> Iterator[Callable[..., Worker]]:
    made: list[Worker] = []

    def make(**options: Any) -> Worker:
        made.append(Worker(capture_server, **options))
        return made[-1]

    yield make
    for worker in made:
        worker.telemetry.shutdown(5)


def roots_of(server: CaptureServer, request_id: str) -> list[Any]:
    return [s for s in server.capture.spans if s.trace_id == trace_id_for(request_id) and s.name == TRACE_NAME]


def spans_then_score(server: CaptureServer, request_id: str) -> bool:
    """The trace's spans arrived before its score (Langfuse drops a score whose trace it does not know)."""
    trace_id = trace_id_for(request_id)
    kinds = [
        kind
        for kind, batch in server.capture.events
        if any((item.trace_id if kind == "spans" else item["traceId"]) == trace_id for item in batch)
    ]
    return "spans" in kinds and "scores" in kinds and kinds.index("spans") < kinds.index("scores")


@pytest.mark.django_db(transaction=True)
async def test_feedback_on_an_exported_answer_sends_only_the_score_even_after_the_rate_went_down(
    client: Client, capture_server: CaptureServer, workers, monkeypatch: pytest.MonkeyPatch, recording_queries
) -> None:
    worker = workers(sample_rate=1.0)
    answer = await worker.answer(monkeypatch)
    assert answer.trace_exported is True
    # Recorded in the exchange's one write: BEGIN, SELECT, SAVEPOINT, INSERT conversation, RELEASE, 2 x INSERT
    # message, UPDATE, COMMIT.
    assert len(recording_queries) == 1 and recording_queries[0] <= 9
    assert await asyncio.to_thread(worker.telemetry.flush, 5)
    assert len(roots_of(capture_server, answer.request_id)) == 1

    worker.telemetry.sampler.set_rate(0.0)  # staff turned tracing down before the feedback came
    await worker.feedback(monkeypatch, client, answer.request_id)

    [score] = capture_server.capture.scores
    assert (score["traceId"], score["name"], score["value"]) == (trace_id_for(answer.request_id), "user_feedback", 0)
    assert len(roots_of(capture_server, answer.request_id)) == 1  # not sent again
    assert worker.telemetry.stats()["export"]["rebuilt_traces"] == 0


@pytest.mark.django_db(transaction=True)
async def test_feedback_on_an_unsampled_answer_sends_its_trace_first_from_any_worker_at_any_rate(
    client: Client, capture_server: CaptureServer, workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    answering = workers(sample_rate=0.0)
    answer = await answering.answer(monkeypatch)
    assert answer.trace_exported is False
    assert await asyncio.to_thread(answering.telemetry.flush, 5)
    assert roots_of(capture_server, answer.request_id) == []

    # Another worker, tracing everything now, and with no memory of the request.
    other = workers(sample_rate=1.0)
    await other.feedback(monkeypatch, client, answer.request_id)

    [root] = roots_of(capture_server, answer.request_id)
    assert root.attribute_json("langfuse.observation.metadata.rebuilt_from") == "messages"
    assert root.attribute_json("langfuse.observation.input") == {"question": "如何重設密碼？"}
    assert root.attribute_json("langfuse.observation.output") == {"answer_chars": len(answer.content)}
    assert spans_then_score(capture_server, answer.request_id)
    assert [score["traceId"] for score in capture_server.capture.scores] == [trace_id_for(answer.request_id)]


@pytest.mark.django_db(transaction=True)
async def test_feedback_on_an_answer_whose_trace_was_dropped_sends_its_trace_first(
    client: Client, capture_server: CaptureServer, workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = workers(sample_rate=1.0, queue_size=1)
    exporter = worker.telemetry.exporter
    entered, release = threading.Event(), threading.Event()
    real_handle = exporter._handle

    def held_handle(item: Any) -> None:
        entered.set()
        release.wait(10)
        real_handle(item)

    monkeypatch.setattr(exporter, "_handle", held_handle)
    first = await worker.answer(monkeypatch)  # taken by the exporter's thread, which is held
    assert await asyncio.to_thread(entered.wait, 5)
    queued = await worker.answer(monkeypatch, "How do I download my certificate?")  # fills the queue (size 1)
    dropped = await worker.answer(monkeypatch, "What browsers are supported?")
    release.set()
    assert await asyncio.to_thread(worker.telemetry.flush, 5)

    assert (first.trace_exported, queued.trace_exported, dropped.trace_exported) == (True, True, False)
    assert worker.telemetry.stats()["export"]["dropped"] == 1
    await worker.feedback(monkeypatch, client, dropped.request_id)

    [root] = roots_of(capture_server, dropped.request_id)
    # From this worker's summary, which still has the spans of every node it ran.
    assert root.attribute_json("langfuse.observation.metadata.rebuilt_from") == "memory"
    nodes = [
        s for s in capture_server.capture.spans if s.trace_id == root.trace_id and s.parent_span_id == root.span_id
    ]
    assert len(nodes) == len(root.attribute_json("langfuse.observation.metadata.nodes"))
    assert spans_then_score(capture_server, dropped.request_id)


# --- admin ----------------------------------------------------------------------------------------------------


QUESTION_OF = {
    "req-0": "如何重設密碼？我忘記了登入用的密碼",
    "req-1": "How do I change my e-mail address?",
    "req-2": "證書可以補發嗎？",
}


@pytest.fixture
def verdicts() -> list[Feedback]:
    rows = []
    for i, (kind, score, comment) in enumerate(
        [("thumbs", 1, "great"), ("thumbs", 0, '=HYPERLINK("http://evil")'), ("rating", 4, "好用")]
    ):
        message = exchange(ALICE, f"req-{i}", question=QUESTION_OF[f"req-{i}"])
        rows.append(
            Feedback.objects.create(
                message=message,
                request_id=message.request_id,
                trace_id=message.trace_id,
                kind=kind,
                score=score,
                comment=comment,
                client_id=f"anon:{ALICE}",
            )
        )
    return rows


def read_csv(content: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(content.decode("utf-8-sig"))))


def test_the_changelist_filters_searches_and_offers_the_export(admin_client: Client, verdicts) -> None:
    page = admin_client.get("/admin/chatbot/feedback/", HTTP_ACCEPT_LANGUAGE="en")
    assert page.status_code == 200
    html = page.content.decode()
    assert "/admin/chatbot/feedback/export.csv?" in html and "Export CSV" in html
    assert admin_client.get("/admin/chatbot/feedback/", {"kind__exact": "rating", "score": "4"}).status_code == 200
    searched = admin_client.get("/admin/chatbot/feedback/", {"q": "好用"})
    assert searched.context["cl"].result_count == 1
    assert admin_client.get("/admin/chatbot/feedback/add/").status_code == 403


def test_the_export_button_exports_what_the_changelist_shows(admin_client: Client, verdicts) -> None:
    everything = admin_client.get("/admin/chatbot/feedback/export.csv")
    assert everything.status_code == 200 and everything["Content-Type"].startswith("text/csv")
    rows = read_csv(everything.content)
    assert sorted(row["request_id"] for row in rows) == ["req-0", "req-1", "req-2"]
    by_id = {row["request_id"]: row for row in rows}
    assert by_id["req-2"]["comment"] == "好用" and by_id["req-2"]["score"] == "4"
    assert by_id["req-1"]["comment"] == '\'=HYPERLINK("http://evil")'  # never a live formula in a spreadsheet
    assert by_id["req-0"]["answer"] == "請到登入頁點選「忘記密碼」。"
    assert by_id["req-0"]["question"] == QUESTION_OF["req-0"]  # what was asked, beside its score
    assert by_id["req-0"]["trace_id"] == trace_id_for("req-0")

    filtered = read_csv(admin_client.get("/admin/chatbot/feedback/export.csv", {"kind__exact": "thumbs"}).content)
    assert sorted(row["request_id"] for row in filtered) == ["req-0", "req-1"]


def test_the_admin_action_exports_the_selected_rows(admin_client: Client, verdicts) -> None:
    response = admin_client.post(
        "/admin/chatbot/feedback/",
        {"action": "export_csv", "_selected_action": [verdicts[0].pk, verdicts[2].pk]},
    )
    assert response.status_code == 200
    assert sorted(row["request_id"] for row in read_csv(response.content)) == ["req-0", "req-2"]


def test_the_export_is_for_staff_only(client: Client, verdicts) -> None:
    response = client.get("/admin/chatbot/feedback/export.csv")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_the_score_filter_speaks_of_thumbs_and_ratings(admin_client: Client, verdicts) -> None:
    page = admin_client.get("/admin/chatbot/feedback/", HTTP_ACCEPT_LANGUAGE="en")
    html = page.content.decode()
    assert "👎 down" in html and "👍 up" in html and "4/5" in html
    down = admin_client.get("/admin/chatbot/feedback/", {"score": "down"})
    assert [f.request_id for f in down.context["cl"].result_list] == ["req-1"]
    four = admin_client.get("/admin/chatbot/feedback/", {"score": "4"})
    assert [f.request_id for f in four.context["cl"].result_list] == ["req-2"]


def test_a_verdict_shows_the_question_it_was_given_on(
    admin_client: Client, verdicts, django_assert_max_num_queries
) -> None:
    page = admin_client.get(f"/admin/chatbot/feedback/{verdicts[1].pk}/change/").content.decode()
    assert QUESTION_OF["req-1"] in page and "👎" in page
    with django_assert_max_num_queries(12):  # the questions come with the rows, not one query per row
        listing = admin_client.get("/admin/chatbot/feedback/").content.decode()
    assert QUESTION_OF["req-0"][:20] in listing
