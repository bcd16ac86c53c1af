"""An OpenAI-compatible LLM server that behaves like vLLM under load, for tests and load experiments.

It is a plain ASGI 3 application (no Django, no models): ``build_app(SimulatorConfig(...))``; the
``simulate_llm`` management command serves it with daphne and prints the ``LLM_BASE_URL`` to use.

Endpoints
    ``GET /v1/models``; ``POST /v1/chat/completions`` (SSE chunks ending ``data: [DONE]``, or JSON);
    ``POST /v1/responses`` (Responses API event stream, or JSON); ``POST /v1/embeddings`` (float or
    base64); ``GET /health``; ``GET /metrics`` (Prometheus: ``vllm:num_requests_running`` /
    ``vllm:num_requests_waiting`` gauges labelled ``model_name``, vLLM token counters and TTFT / e2e
    histograms, ``llm_sim_*`` counters of requests, 429s, 5xx, aborts and drops per endpoint);
    ``GET /admin/stats`` (attempts, running, waiting, completed, aborted, dropped, by status and endpoint);
    ``GET /admin/requests`` (the last 100 request bodies); ``GET|POST /admin/faults``; ``GET|POST
    /admin/config`` (the start-up settings but the faults: timing, lengths, ``max_num_seqs``, models...; a change
    applies to the requests that start after it, a bad value is a 400 naming the field); ``POST /admin/reset``
    (zero the counters, restore the start-up configuration and faults and reseed the RNG).

Model of behaviour
    Scheduling: at most ``max_num_seqs`` sequences decode at once; later requests wait in FIFO order
    (``max_waiting`` bounds the queue, beyond it 503). A streaming request gets its headers at once, then
    waits for a slot. Prefill takes ``(ttft_ms + prefill_ms_per_token * prompt_tokens) * slowdown`` and
    each further token ``tpot_ms * slowdown`` with ``slowdown = 1 + batch_slowdown * (running - 1) /
    max_num_seqs`` re-read every token, so latency grows with the batch. Each sequence is its own asyncio
    loop pacing against absolute deadlines. A client that disconnects (ASGI ``http.disconnect``, watched
    concurrently with streaming) is cancelled at once, freeing its slot or queue place.

    Content: deterministic from the prompt. The answer quotes windows of the last user message and of
    numbered sources (``[1] ...`` lines) in the question's language (Chinese if it is mostly CJK), with
    ``[n]`` citations when sources exist. Length: ``output_tokens`` (0 = the request's max_tokens), capped
    by ``max_tokens`` / ``max_completion_tokens`` / ``max_output_tokens`` (finish_reason "length").
    A JSON-schema request (chat ``response_format``, vLLM ``guided_json``, responses ``text.format``) gets
    a minimal valid instance of the schema. With ``reasoning_tokens`` N, chat streams
    ``delta.reasoning_content`` and responses stream ``response.reasoning_text.*`` (or
    ``response.reasoning_summary_*`` when ``reasoning.summary`` is requested) before the answer; chat's
    ``chat_template_kwargs={"enable_thinking": false}`` turns it off. Usage: prompt tokens estimated from
    the text (1 per CJK character, 1 per 4 other characters), completion tokens = tokens generated.
    Embeddings: signed feature hashing of words and CJK bigrams, L2-normalised, ``dimensions`` from the
    request or ``embedding_dim``.

Faults (flags, and the same fields at run time via ``POST /admin/faults``)
    ``rate_429`` (with ``Retry-After: retry_after``), ``rate_500``, ``hang_rate`` (headers sent, then
    nothing for ``hang_seconds``, 0 = until the client leaves), ``stall_after`` K / ``stall_seconds`` S /
    ``stall_rate``, ``drop_after`` K / ``drop_rate`` (TCP connection closed after K tokens, without the
    terminating chunk). ``fail_next`` is a deterministic FIFO consumed one per request before any rate:
    ``"429"``, ``"500"``, any 4xx/5xx, ``"hang[:S]"``, ``"stall[:K[:S]]"``, ``"drop[:K]"``, ``"ok"``.
    Faults apply to the endpoints in ``endpoints`` (default chat and responses). Prefer ``fail_next`` in
    tests: it needs no seed arithmetic.

Flags of ``manage.py simulate_llm``: --host --port --model --embedding-model --max-num-seqs --max-waiting
--ttft-ms --prefill-ms-per-token --tpot-ms --batch-slowdown --output-tokens --reasoning-tokens
--embedding-dim --seed --rate-429 --retry-after --rate-500 --hang-rate --hang-seconds --stall-after
--stall-seconds --stall-rate --drop-after --drop-rate --fail-next --fault-endpoints.

Tests start it as a subprocess with ``devtools.simulator.testing.SimulatorProcess``.
"""

from devtools.simulator.app import SimulatorApp, build_app
from devtools.simulator.config import ConfigError, FaultConfig, SimulatorConfig

__all__ = ["ConfigError", "FaultConfig", "SimulatorApp", "SimulatorConfig", "build_app"]
