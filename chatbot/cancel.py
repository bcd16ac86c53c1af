"""Stopping an answer from any worker process.

An answer runs in the worker that took its question, but its cancel may land on another one (the SSE cancel
endpoint behind a load balancer, or a WebSocket that resumed the stream elsewhere). So while an answer runs, its
stream listens on a channel of its own in the channel layer, a member of the group `chat-run.<request_id>`; a
cancel asks that group and waits (bounded) for the reply, which says whether a live run of the same client took
it. Nobody replying within `REPLY_TIMEOUT_SECONDS` means no such run: it finished, never existed, or its worker
went away. The membership ends with the run (`group_discard` after the terminal event; the layer's group expiry
covers a worker that died).

With channels-redis (`REDIS_URL`) this reaches every worker; with the in-memory layer it reaches this process,
which is then all there is. A run of another client answers like an unknown one, so a cancel neither stops
nor reveals anybody else's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hmac
import logging
import re
from typing import Any

from channels.layers import BaseChannelLayer, get_channel_layer

from chatbot.replay import LiveStream, stream_registry

logger = logging.getLogger(__name__)

# Request ids are uuid4 hex; anything that is not a plain token names no run (and no valid group).
REQUEST_ID = re.compile(r"^[0-9A-Za-z_-]{1,64}$")
GROUP_PREFIX = "chat-run."
CANCEL = "chat.run.cancel"
REPLY = "chat.run.cancel.reply"
# One layer operation (group add/discard, a send): a slow Redis must not hold a run or a request for long.
LAYER_TIMEOUT_SECONDS = 1.0
# How long a cancel waits for the worker running the answer; a round trip takes milliseconds.
REPLY_TIMEOUT_SECONDS = 1.0
# After the layer failed to deliver a message to a listener, it tries again this much later.
RETRY_SECONDS = 1.0

_background: set[asyncio.Task[Any]] = set()


class Outcome(enum.Enum):
    DELIVERED = "delivered"  # a live run of this client took the cancel; its stream ends with `cancelled`
    NOT_FOUND = "not_found"  # no live run of this client under that id (finished, unknown, or another client's)
    UNREACHABLE = "unreachable"  # the channel layer failed: other workers could not be asked


def request_id_valid(request_id: object) -> bool:
    return isinstance(request_id, str) and REQUEST_ID.match(request_id) is not None


def run_group(request_id: str) -> str:
    return GROUP_PREFIX + request_id


def _keep(task: asyncio.Task[Any]) -> asyncio.Task[Any]:
    _background.add(task)  # the loop keeps only weak references to tasks
    task.add_done_callback(_background.discard)
    return task


def _take(stream: LiveStream, client_id: str) -> bool:
    """Cancel `stream` for `client_id` if it is that client's and still running."""
    if not stream.running or not hmac.compare_digest(stream.client_id.encode(), client_id.encode()):
        return False
    stream.cancel()
    return True


# --- the worker running the answer ------------------------------------------------------------------------------


def cancel_listen(stream: LiveStream, layer: BaseChannelLayer | None = None) -> asyncio.Task[None] | None:
    """Let a cancel from any worker reach `stream` until it ends. None when there is no channel layer."""
    layer = layer if layer is not None else get_channel_layer()
    if layer is None or not request_id_valid(stream.request_id):
        return None
    return _keep(asyncio.create_task(_listen(stream, layer), name=f"cancel-listen-{stream.request_id}"))


async def _listen(stream: LiveStream, layer: BaseChannelLayer) -> None:
    group = run_group(stream.request_id)
    channel = await layer.new_channel()
    try:
        await asyncio.wait_for(layer.group_add(group, channel), LAYER_TIMEOUT_SECONDS)
    except Exception as exc:
        logger.warning("answer %s can be cancelled from this worker only: %r", stream.request_id, exc)
        return
    ended = asyncio.ensure_future(stream.ended())
    received: asyncio.Future[Any] | None = None
    try:
        while not ended.done():
            received = asyncio.ensure_future(layer.receive(channel))
            await asyncio.wait({received, ended}, return_when=asyncio.FIRST_COMPLETED)
            if not received.done():
                break
            try:
                message = received.result()
            except Exception as exc:
                logger.warning("cancel channel of answer %s failed: %r", stream.request_id, exc)
                await asyncio.wait({ended}, timeout=RETRY_SECONDS)
                continue
            await _reply(stream, layer, message)
    finally:
        ended.cancel()
        if received is not None and not received.done():
            received.cancel()  # its own cleanup runs at once; awaiting it bounds that
            await asyncio.wait({received}, timeout=LAYER_TIMEOUT_SECONDS)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(layer.group_discard(group, channel), LAYER_TIMEOUT_SECONDS)


async def _reply(stream: LiveStream, layer: BaseChannelLayer, message: Any) -> None:
    if not isinstance(message, dict) or message.get("type") != CANCEL:
        return
    client_id, reply_to = message.get("client_id"), message.get("reply_to")
    delivered = isinstance(client_id, str) and _take(stream, client_id)
    if not isinstance(reply_to, str) or not reply_to:
        return
    reply = {"type": REPLY, "request_id": stream.request_id, "delivered": delivered}
    try:
        await asyncio.wait_for(layer.send(reply_to, reply), LAYER_TIMEOUT_SECONDS)
    except Exception as exc:
        # The asker then answers "not found" after its timeout; the run itself was cancelled all the same.
        logger.warning("could not reply to a cancel of answer %s: %r", stream.request_id, exc)


# --- any worker -------------------------------------------------------------------------------------------------


async def cancel_run(request_id: str, *, client_id: str, layer: BaseChannelLayer | None = None) -> Outcome:
    """Stop `client_id`'s answer `request_id` wherever it runs."""
    if not request_id_valid(request_id):
        return Outcome.NOT_FOUND
    stream = stream_registry().local(request_id)
    if stream is not None:
        # It ran in this process (request ids are unique): the local stream is the whole truth.
        return Outcome.DELIVERED if _take(stream, client_id) else Outcome.NOT_FOUND
    return await cancel_elsewhere(request_id, client_id=client_id, layer=layer)


async def cancel_elsewhere(request_id: str, *, client_id: str, layer: BaseChannelLayer | None = None) -> Outcome:
    """Ask the worker running `request_id` (through the channel layer) to stop it, and wait for its reply."""
    layer = layer if layer is not None else get_channel_layer()
    if layer is None or not request_id_valid(request_id):
        return Outcome.NOT_FOUND
    reply_to = await layer.new_channel()
    message = {"type": CANCEL, "request_id": request_id, "client_id": client_id, "reply_to": reply_to}
    try:
        await asyncio.wait_for(layer.group_send(run_group(request_id), message), LAYER_TIMEOUT_SECONDS)
        try:
            reply = await asyncio.wait_for(layer.receive(reply_to), REPLY_TIMEOUT_SECONDS)
        except TimeoutError:
            return Outcome.NOT_FOUND  # nobody runs it (a group without members takes the message silently)
    except Exception as exc:
        logger.warning("could not ask other workers to cancel answer %s: %r", request_id, exc)
        return Outcome.UNREACHABLE
    delivered = isinstance(reply, dict) and reply.get("type") == REPLY and reply.get("delivered") is True
    return Outcome.DELIVERED if delivered else Outcome.NOT_FOUND


def cancel_elsewhere_later(request_id: str, *, client_id: str) -> asyncio.Task[Outcome]:
    """`cancel_elsewhere` in a task of its own (bounded by its timeouts), for a caller that must not wait."""
    coroutine = cancel_elsewhere(request_id, client_id=client_id)
    return _keep(asyncio.create_task(coroutine, name=f"cancel-{request_id}"))
