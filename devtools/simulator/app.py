"""The ASGI application: routing, the small endpoints, and the admin API used by tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from devtools.simulator.asgi_io import (
    ClientDisconnected,
    Receive,
    Scope,
    Send,
    error_payload,
    read_body,
    send_bytes,
    send_json,
)
from devtools.simulator.bodies import BadRequest, optional_int, parse_json_body
from devtools.simulator.chat import handle_chat
from devtools.simulator.config import ConfigError, SimulatorConfig
from devtools.simulator.embeddings import embed, encode_base64, input_texts
from devtools.simulator.engine import Engine, StreamDropped, hang
from devtools.simulator.faults import capability_refusal
from devtools.simulator.responses import handle_responses
from devtools.simulator.serving import RequestContext, run_guarded
from devtools.simulator.text import estimate_tokens

Handler = Callable[[RequestContext, dict[str, Any]], Awaitable[None]]


class SimulatorApp:
    """ASGI 3 callable. One instance per simulated server; all state lives in ``engine``."""

    def __init__(self, config: SimulatorConfig) -> None:
        config.validate()
        self.engine = Engine(config)
        self.started = time.time()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method = scope["method"]
        path = scope["path"].rstrip("/") or "/"
        ctx = RequestContext(self.engine, scope, receive, send, endpoint="", arrival=_now())
        if path in _API_ROUTES:
            if method != "POST":
                await send_json(send, 405, error_payload(405, f"Use POST for {path}."))
                return
            ctx.endpoint, handler = _API_ROUTES[path]
            await self._api(ctx, handler)
            return
        simple = {
            ("GET", "/health"): self._health,
            ("GET", "/v1/models"): self._models,
            ("GET", "/metrics"): self._metrics,
            ("GET", "/admin/stats"): self._stats,
            ("GET", "/admin/requests"): self._requests,
            ("GET", "/admin/faults"): self._get_faults,
            ("POST", "/admin/faults"): self._set_faults,
            ("GET", "/admin/config"): self._get_config,
            ("POST", "/admin/config"): self._set_config,
            ("POST", "/admin/reset"): self._reset,
        }
        route = simple.get((method, path))
        if route is None:
            known = any(p == path for _, p in simple)
            status = 405 if known else 404
            await send_json(send, status, error_payload(status, f"No route for {method} {path}."))
            return
        await route(ctx)

    async def _api(self, ctx: RequestContext, handler: Handler) -> None:
        try:
            raw = await read_body(ctx.receive)
        except ClientDisconnected:
            return
        try:
            body = parse_json_body(raw)
        except BadRequest as exc:
            self.engine.stats.attempt(ctx.endpoint, None)
            await ctx.send_error(400, exc.message)
            return
        self.engine.stats.attempt(ctx.endpoint, body)
        refused = capability_refusal(ctx.endpoint, body, self.engine.faults.config.refuse)
        if refused is not None:
            await ctx.send_error(*refused)
            return
        await handler(ctx, body)

    # -- small endpoints -------------------------------------------------------------------------------

    async def _health(self, ctx: RequestContext) -> None:
        await send_bytes(ctx.send, 200, b"", b"text/plain")

    async def _models(self, ctx: RequestContext) -> None:
        config = self.engine.config
        data = [
            {"id": name, "object": "model", "created": int(self.started), "owned_by": "vllm", "root": name}
            for name in (config.model, config.embedding_model)
        ]
        await send_json(ctx.send, 200, {"object": "list", "data": data})

    async def _metrics(self, ctx: RequestContext) -> None:
        body = self.engine.prometheus().encode()
        await send_bytes(ctx.send, 200, body, b"text/plain; version=0.0.4; charset=utf-8")

    async def _stats(self, ctx: RequestContext) -> None:
        await send_json(ctx.send, 200, self.engine.snapshot())

    async def _requests(self, ctx: RequestContext) -> None:
        await send_json(ctx.send, 200, {"requests": list(self.engine.stats.recent)})

    async def _get_faults(self, ctx: RequestContext) -> None:
        await send_json(ctx.send, 200, self.engine.faults.config.to_dict())

    async def _set_faults(self, ctx: RequestContext) -> None:
        try:
            changes = parse_json_body(await read_body(ctx.receive))
            faults = self.engine.faults.update(changes)
        except ClientDisconnected:
            return
        except BadRequest as exc:
            await send_json(ctx.send, 400, error_payload(400, exc.message))
            return
        except ConfigError as exc:
            await send_json(ctx.send, 400, error_payload(400, str(exc)))
            return
        await send_json(ctx.send, 200, faults.to_dict())

    async def _get_config(self, ctx: RequestContext) -> None:
        await send_json(ctx.send, 200, self.engine.config.engine_settings())

    async def _set_config(self, ctx: RequestContext) -> None:
        try:
            changes = parse_json_body(await read_body(ctx.receive))
            config = self.engine.configure(changes)
        except ClientDisconnected:
            return
        except BadRequest as exc:
            await send_json(ctx.send, 400, error_payload(400, exc.message))
            return
        except ConfigError as exc:
            payload = error_payload(400, str(exc))
            payload["error"]["param"] = exc.field
            await send_json(ctx.send, 400, payload)
            return
        await send_json(ctx.send, 200, config.engine_settings())

    async def _reset(self, ctx: RequestContext) -> None:
        try:
            await read_body(ctx.receive)
        except ClientDisconnected:
            return
        self.engine.reset()
        engine = self.engine
        restored = {"config": engine.config.engine_settings(), "faults": engine.faults.config.to_dict()}
        await send_json(ctx.send, 200, {**restored, **engine.snapshot()})


def _now() -> float:
    return asyncio.get_running_loop().time()


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def handle_embeddings(ctx: RequestContext, body: dict[str, Any]) -> None:
    config = ctx.engine.config
    try:
        texts = input_texts(body.get("input"))
        if not texts:
            raise BadRequest("input must not be empty.")
        dimensions = optional_int(body, "dimensions") or config.embedding_dim
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise BadRequest(f"encoding_format must be 'float' or 'base64', got {encoding!r}.")
    except BadRequest as exc:
        await ctx.send_error(400, exc.message)
        return
    except (TypeError, ValueError) as exc:
        await ctx.send_error(400, f"input: {exc}")
        return
    plan = ctx.engine.faults.decide("embeddings")
    if plan.status is not None:
        await ctx.send_error(plan.status, "Simulated embedding failure.", retry_after=plan.retry_after)
        return

    async def work() -> None:
        if plan.hang_seconds is not None:
            await hang(plan.hang_seconds)
        if plan.drop_after is not None:
            raise StreamDropped
        data = []
        for index, text in enumerate(texts):
            vector = embed(text, dimensions)
            value: Any = encode_base64(vector) if encoding == "base64" else vector
            data.append({"object": "embedding", "index": index, "embedding": value})
        tokens = sum(estimate_tokens(t) for t in texts)
        model = str(body.get("model") or config.embedding_model)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        await ctx.send_document({"object": "list", "data": data, "model": model, "usage": usage})
        ctx.engine.stats.completed("embeddings", prompt_tokens=tokens, completion_tokens=0, reason="stop")

    await run_guarded(ctx, work())


# Endpoints whose JSON body is parsed and whose attempts are counted, by endpoint name.
_API_ROUTES: dict[str, tuple[str, Handler]] = {
    "/v1/chat/completions": ("chat", handle_chat),
    "/v1/responses": ("responses", handle_responses),
    "/v1/embeddings": ("embeddings", handle_embeddings),
}


def build_app(config: SimulatorConfig | None = None) -> SimulatorApp:
    """An ASGI 3 app simulating one vLLM server. Raises ConfigError for an invalid config."""
    return SimulatorApp(config or SimulatorConfig())
