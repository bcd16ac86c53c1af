"""The OpenAI-compatible API: `GET /v1/models` and `POST /v1/chat/completions`, with API keys.

Any OpenAI client (the `openai` SDKs, Open WebUI, LibreChat, curl) can use the help-centre assistant as a model.
It is one more transport of the chat exchange (`chatbot.streaming`), like the WebSocket and SSE consumers: the
same pipeline, concurrency manager, cache, telemetry and exchange records; only the framing differs.

- `request`: the request body turned into an `AskInput` (what is honoured, what is ignored, what is refused).
- `chunks`: the pipeline's events turned into `chat.completion.chunk` / `chat.completion` objects.
- `errors`: OpenAI's error shape, and which HTTP status each pipeline error code gets.
- `consumers`: the two endpoints (Channels consumers: a client that goes away cancels its answer).
"""
