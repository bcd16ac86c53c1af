"""A stand-in Langfuse server on loopback that records what the SDK sends (OTLP spans and scores).

Used as `LANGFUSE_HOST` by the export tests and the telemetry lag benchmark: no network beyond 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

TRACES_PATH = "/api/public/otel/v1/traces"
SCORES_PATH = "/api/public/scores"


@dataclass
class CapturedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]

    def attribute_json(self, key: str) -> Any:
        value = self.attributes.get(key)
        return json.loads(value) if isinstance(value, str) else value


@dataclass
class Capture:
    """What the server received, in arrival order: (kind, payload) with kind "spans" or "scores"."""

    events: list[tuple[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def spans(self) -> list[CapturedSpan]:
        with self.lock:
            return [span for kind, batch in self.events if kind == "spans" for span in batch]

    @property
    def scores(self) -> list[dict[str, Any]]:
        with self.lock:
            return [score for kind, batch in self.events if kind == "scores" for score in batch]

    def complete_traces(self) -> int:
        """Traces whose root arrived with a span for every node its metadata lists (none lost on the way)."""
        roots: dict[str, int] = {}
        node_spans: dict[str, int] = {}
        for span in self.spans:
            if span.parent_span_id == "":
                roots[span.trace_id] = len(span.attribute_json("langfuse.observation.metadata.nodes") or [])
            elif span.attributes.get("langfuse.observation.type") == "span":
                node_spans[span.trace_id] = node_spans.get(span.trace_id, 0) + 1
        return sum(1 for trace_id, nodes in roots.items() if node_spans.get(trace_id, 0) == nodes)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: _value(item.value) for item in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def decode_spans(body: bytes) -> list[CapturedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    CapturedSpan(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        name=span.name,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes={item.key: _value(item.value) for item in span.attributes},
                    )
                )
    return spans


class CaptureServer:
    """`with CaptureServer() as server:` -> `server.url` for LANGFUSE_HOST, `server.capture` for what came.

    `reply_delay`: seconds each POST is held (body read, nothing answered) before it is recorded and answered, a
    Langfuse that is slow or hangs; held requests are let go when the server stops.
    """

    def __init__(self, *, decode: bool = True, reply_delay: float = 0.0) -> None:
        self.capture = Capture()
        self.requests = 0
        self.bytes_received = 0
        self.reply_delay = reply_delay
        self._stopping = threading.Event()
        capture = self.capture
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if owner.reply_delay:
                    owner._stopping.wait(owner.reply_delay)
                owner.requests += 1
                owner.bytes_received += len(body)
                if self.headers.get("Content-Encoding", "").lower() == "gzip":
                    body = gzip.decompress(body)
                path = self.path.split("?", 1)[0]
                with capture.lock:
                    capture.headers.append(dict(self.headers.items()))
                if path == TRACES_PATH:
                    if decode:
                        spans = decode_spans(body)
                        with capture.lock:
                            capture.events.append(("spans", spans))
                    self._reply(200, b"", "application/x-protobuf")
                elif path == SCORES_PATH:
                    scores = json.loads(body)
                    with capture.lock:
                        capture.events.append(("scores", scores if isinstance(scores, list) else [scores]))
                    self._reply(202, b'{"message":"Accepted"}', "application/json")
                else:
                    self._reply(404, b'{"message":"not found"}', "application/json")

            def do_GET(self) -> None:
                # Counts for a benchmark that runs this server in another process.
                if self.path != "/stats":
                    self._reply(404, b'{"message":"not found"}', "application/json")
                    return
                stats = {
                    "requests": owner.requests,
                    "bytes": owner.bytes_received,
                    "spans": len(capture.spans),
                    "traces": len({span.trace_id for span in capture.spans}),
                    "complete_traces": capture.complete_traces(),
                    "scores": len(capture.scores),
                }
                self._reply(200, json.dumps(stats).encode(), "application/json")

            def _reply(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="capture-server", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # an IPv4 server's address; only a Unix socket's would be bytes
        return f"http://{host}:{port}"

    def __enter__(self) -> CaptureServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def main() -> None:
    """`python -m tests.rag.telemetry.capture`: serve on a free loopback port, print its URL, run until killed."""
    server = CaptureServer()
    server._thread.start()
    print(server.url, flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()


if __name__ == "__main__":
    main()
