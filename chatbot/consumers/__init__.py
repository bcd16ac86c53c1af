"""Transports of the chat exchange: WebSocket (`ws.ChatConsumer`) and SSE (`sse.AskStreamConsumer`, with
`sse.StreamResumeConsumer` and `sse.StreamCancelConsumer` for resuming and stopping an answer).

Both are thin: they parse their own framing, call `chatbot.streaming` and `chatbot.replay`, and forward events
unchanged.
"""

from chatbot.consumers.sse import AskStreamConsumer, StreamCancelConsumer, StreamResumeConsumer
from chatbot.consumers.ws import ChatConsumer

__all__ = ["AskStreamConsumer", "ChatConsumer", "StreamCancelConsumer", "StreamResumeConsumer"]
