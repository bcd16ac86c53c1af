"""The process's pipeline runtime, built from Django settings once.

This is the one place where settings become node dependencies; nodes themselves never read settings.

With `LLM_BASE_URL` set, one `LLMBackend` per process goes into `deps.llm` (its call policy owns the process's
requests-per-minute windows), with the prompt registry as `deps.prompts`; the process's concurrency manager
takes its limits from the `LLM_MAX_CONCURRENT_*` settings unless the live settings row was applied first (the
row wins: staff edit it at run time). Without `LLM_BASE_URL` everything stays offline.

The telemetry's sample rate follows the live settings row as well: `LANGFUSE_SAMPLE_RATE` only until the row is
applied (at server start-up `warm_up` applies the stored row, for the manager too), then every change staff save
in the concurrency console.

The embedder comes from the settings too (`build_embedder`): a local sentence-transformers folder
(`SENTENCE_TRANSFORMERS_MODEL`), an OpenAI-compatible server (`EMBEDDING_BASE_URL`, through the same call policy
and concurrency manager as the LLM), or the offline lexical embedding. The retriever's search mode follows the
embedder's kind unless `RAG_SEARCH_MODE` says otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import fields
from functools import partial
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from concurrency.cluster import RedisPermits, cluster_manager_install
from concurrency.live import live_settings_preload, register_stats_provider
from concurrency.live.apply import on_settings_applied, settings_current
from concurrency.live.workers import redis_config, worker_id, workers_index_key
from concurrency.manager import get_manager
from concurrency.selectors import concurrency_settings_env_differences
from infra.ratelimit import RateLimiter, rate_limiter_for
from rag.branding.selectors import organisation_source
from rag.curated.index import build_curated_answers
from rag.deps import PipelineConfig, PipelineDeps
from rag.documents.hooks import on_documents_reindexed
from rag.events import Coalescing
from rag.prompting.prompts import OrganisationPrompts, RegistryPrompts
from rag.retrieval.breaker import EmbedderBreaker
from rag.retrieval.embedding import AsyncEmbedder, LexicalEmbedder
from rag.retrieval.other_language import OtherLanguageSearch
from rag.retrieval.prompts import EmbeddingPrompts, resolve_prompts
from rag.retrieval.retriever import StoreRetriever, default_mode
from rag.retrieval.sparse import query_encoder
from rag.retrieval.st_embedder import (
    SentenceTransformerEmbedder,
    SentenceTransformersUnavailable,
    check_model_folder,
    check_package,
)
from rag.retrieval.store import SearchSettings, open_store_from_settings
from rag.runtime import PipelineRuntime
from rag.semcache.cache import build_semantic_cache
from rag.semcache.services import cache_entries_invalidate_for_documents
from rag.telemetry import current_telemetry, get_telemetry
from rag.text.glossary import builtin_glossary
from rag.workflows.default import default_workflow

if TYPE_CHECKING:
    from rag.llm import CallPolicyConfig, LLMBackend, LLMConfig

# rag.llm and rag.nodes are imported where they are used: they load the openai SDK (over a second), which a
# command that never builds the pipeline (`manage.py ask` through a server, `reindex` offline) need not wait for.

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_runtime: PipelineRuntime | None = None
_unfollow_sample_rate: Callable[[], None] | None = None
# the event loop that serves requests (seen by get_runtime): a network embedder's sync calls run there
_serving_loop: asyncio.AbstractEventLoop | None = None

LLM_BACKENDS = ("default", "chat", "responses", "embedding")


def pipeline_config_from_settings() -> PipelineConfig:
    return PipelineConfig(
        max_question_chars=settings.RAG_MAX_QUESTION_CHARS,
        top_k=settings.RAG_RETRIEVAL_TOP_K,
        retrieval_timeout=settings.RAG_RETRIEVAL_TIMEOUT,
        max_retrieval_loops=settings.RAG_MAX_RETRIEVAL_LOOPS,
        default_language=settings.RAG_DEFAULT_LANGUAGE,
        degraded_answers=settings.RAG_DEGRADED_ANSWERS,
        rate_limit_per_client=settings.RAG_RATE_LIMIT_PER_MINUTE,
        rate_limit_per_address=settings.RAG_RATE_LIMIT_PER_ADDRESS_PER_MINUTE,
        # answers carry these links to wherever they are shown: absolute once PUBLIC_BASE_URL says where we are
        forms_base_url=settings.PUBLIC_BASE_URL + "/forms/",
        forms_export_url=settings.PUBLIC_BASE_URL + "/api/v1/rag/forms/export.csv",
    )


# --- LLM -------------------------------------------------------------------------------------------------------


def parse_node_map(variable: str, raw: str, convert: Callable[[str], Any]) -> dict[str, Any]:
    """``"planner=qwen-small, response_synth=qwen-big"`` -> {"planner": "qwen-small", ...}; a bad entry fails
    with ImproperlyConfigured naming the variable."""
    out: dict[str, Any] = {}
    for entry in (raw or "").split(","):
        if not entry.strip():
            continue
        node, sep, value = entry.partition("=")
        node, value = node.strip(), value.strip()
        if not sep or not node or not value:
            raise ImproperlyConfigured(f"{variable}: expected node=value pairs separated by commas, got {entry!r}")
        try:
            out[node] = convert(value)
        except ValueError:
            raise ImproperlyConfigured(f"{variable}: bad value {value!r} for node {node!r}") from None
    return out


def llm_config_from_settings() -> LLMConfig:
    from rag.llm import LLMConfig  # loads the openai SDK: see the note under the imports

    return LLMConfig(
        base_url=settings.LLM_BASE_URL,
        api_key=settings.LLM_API_KEY,
        chat_model=settings.LLM_CHAT_MODEL,
        responses_model=settings.LLM_RESPONSES_MODEL,
        node_models=parse_node_map("LLM_NODE_MODELS", getattr(settings, "LLM_NODE_MODELS", ""), str),
        node_temperatures=parse_node_map(
            "LLM_NODE_TEMPERATURES", getattr(settings, "LLM_NODE_TEMPERATURES", ""), float
        ),
        connect_timeout=settings.LLM_CONNECT_TIMEOUT,
        http_client=settings.LLM_HTTP_CLIENT,
        first_token_timeout=settings.LLM_FIRST_TOKEN_TIMEOUT,
        between_tokens_timeout=settings.LLM_BETWEEN_TOKENS_TIMEOUT,
        total_timeout=settings.LLM_REQUEST_TIMEOUT,
        embedding_base_url=settings.EMBEDDING_BASE_URL,
        embedding_api_key=settings.EMBEDDING_API_KEY,
        embedding_model=settings.EMBEDDING_MODEL,
        embedding_dim=settings.EMBEDDING_DIM,
        embedding_batch_size=settings.EMBEDDING_BATCH_SIZE,
    )


# The call policy's own errors come first: the event wait ends a request only when the policy could not.
IDLE_MARGIN_SECONDS = 5.0


def call_policy_config_from_settings() -> CallPolicyConfig:
    from rag.llm import CallPolicyConfig  # loads the openai SDK: see the note under the imports

    return CallPolicyConfig(
        rpm=dict.fromkeys(LLM_BACKENDS, settings.LLM_RPM_LIMIT),
        max_attempts=settings.LLM_RETRY_MAX_ATTEMPTS,
        backoff_base=settings.LLM_RETRY_BASE_SECONDS,
        backoff_max=settings.LLM_RETRY_MAX_SECONDS,
        retry_after_cap=settings.LLM_RETRY_AFTER_CAP,
        retry_budget=settings.LLM_RETRY_BUDGET_SECONDS,
    )


def pipeline_idle_timeout() -> float:
    """How long a request's event stream may stay silent before the runtime ends it with `timeout`. It must
    outlast the longest step that sends nothing: one LLM call, retries included, which its total deadline
    bounds (LLM_REQUEST_TIMEOUT); or a retrieval. Shorter, and a slow or failing LLM call would be cut off by
    the event wait before the call policy could end it with its own error (upstream_error, busy)."""
    return max(settings.LLM_REQUEST_TIMEOUT, settings.RAG_RETRIEVAL_TIMEOUT) + IDLE_MARGIN_SECONDS


def build_llm_backend() -> LLMBackend | None:
    """The process's LLM backend, or None when no LLM server is configured (the offline rules answer)."""
    if not settings.LLM_BASE_URL:
        return None
    from rag.llm import LLMBackend  # loads the openai SDK: see the note under the imports
    from rag.llm.policy import CallPolicy

    try:
        policy = CallPolicy(call_policy_config_from_settings(), windows=llm_rate_windows_from_settings())
        return LLMBackend(llm_config_from_settings(), policy=policy)
    except ValueError as exc:
        raise ImproperlyConfigured(f"LLM settings: {exc}") from exc


def llm_rate_windows_from_settings() -> RateLimiter | None:
    """The windows of `LLM_RPM_LIMIT`: the cluster's in Redis when the LLM limits are the cluster's (`REDIS_URL`
    and `LLM_CLUSTER_LIMITS`), else None (the call policy's own, in this process)."""
    if not (settings.REDIS_URL and settings.LLM_CLUSTER_LIMITS):
        return None
    url, prefix = redis_config()
    return rate_limiter_for(url, prefix=prefix)


def serving_loop() -> asyncio.AbstractEventLoop | None:
    return _serving_loop


def check_embedding_settings() -> None:
    """Refuse a bad embedder choice without loading anything (a command checks before it creates a job)."""
    if settings.SENTENCE_TRANSFORMERS_MODEL:
        if settings.EMBEDDING_BASE_URL:
            raise ImproperlyConfigured("set EMBEDDING_BASE_URL or SENTENCE_TRANSFORMERS_MODEL, not both")

        try:
            check_model_folder(settings.SENTENCE_TRANSFORMERS_MODEL)
            check_package()
        except SentenceTransformersUnavailable as exc:
            raise ImproperlyConfigured(str(exc)) from exc


def embedding_prompts_from_settings() -> EmbeddingPrompts:
    """The query/passage markers of the configured model (rag.retrieval.prompts), refused at start-up when
    EMBEDDING_INPUT_TYPE is malformed."""
    model = settings.SENTENCE_TRANSFORMERS_MODEL or settings.EMBEDDING_MODEL
    try:
        return resolve_prompts(
            model=model,
            query_prefix=settings.EMBEDDING_QUERY_PREFIX,
            passage_prefix=settings.EMBEDDING_PASSAGE_PREFIX,
            input_type=settings.EMBEDDING_INPUT_TYPE,
        )
    except ValueError as exc:
        raise ImproperlyConfigured(f"EMBEDDING_INPUT_TYPE: {exc}") from exc


def build_embedder(llm: Any = None) -> Any:
    """The process's embedder from the settings; a bad choice fails here, at start-up, naming the variable.

    A network embedder shares `llm` (its call policy and RPM windows) when given one, and runs its sync calls
    (indexing, the semantic cache) on the serving loop, where the concurrency manager lives.
    """

    check_embedding_settings()
    if settings.SENTENCE_TRANSFORMERS_MODEL:
        try:
            return SentenceTransformerEmbedder(
                settings.SENTENCE_TRANSFORMERS_MODEL,
                batch_size=settings.EMBEDDING_BATCH_SIZE,
                prompts=embedding_prompts_from_settings(),
            )
        except SentenceTransformersUnavailable as exc:
            raise ImproperlyConfigured(str(exc)) from exc
    if settings.EMBEDDING_BASE_URL:
        from rag.llm import LLMBackend  # loads the openai SDK: see the note under the imports
        from rag.llm.embedder import OpenAIEmbedder

        if llm is None:
            try:
                llm = LLMBackend(llm_config_from_settings(), call_policy_config_from_settings())
            except ValueError as exc:
                raise ImproperlyConfigured(f"embedding settings: {exc}") from exc
        return OpenAIEmbedder(llm, home_loop=serving_loop, prompts=embedding_prompts_from_settings())
    return LexicalEmbedder()


def search_settings_from_settings(embedder: Any) -> tuple[Any, Any]:
    """(mode, SearchSettings) for the retriever: RAG_SEARCH_MODE, else the embedder kind's default."""

    mode = settings.RAG_SEARCH_MODE or default_mode(embedder)
    return mode, SearchSettings(
        candidates=settings.RAG_SEARCH_CANDIDATES,
        rrf_k=settings.RAG_SEARCH_RRF_K,
        rescore_weight=settings.RAG_SEARCH_RESCORE_WEIGHT,
        dense_weight=settings.RAG_SEARCH_DENSE_WEIGHT,
        rerank_depth=settings.RAG_SEARCH_RERANK_DEPTH,
    )


def other_language_from_settings() -> OtherLanguageSearch | None:
    """The search of the other language's passages with a question's glossary translations
    (rag.retrieval.other_language), on with the bilingual query expansion."""
    enabled = settings.RAG_CROSS_LANGUAGE_EXPANSION and settings.RAG_CROSS_LANGUAGE_WEIGHT > 0
    return OtherLanguageSearch(builtin_glossary()) if enabled else None


def query_encoder_from_settings() -> Any:
    """The retriever's BM25 query encoder: with the bilingual glossary expansion unless
    RAG_CROSS_LANGUAGE_EXPANSION is off."""
    weight = settings.RAG_CROSS_LANGUAGE_WEIGHT if settings.RAG_CROSS_LANGUAGE_EXPANSION else 0.0
    return query_encoder(weight)


def embedder_breaker_from_settings(embedder: Any) -> EmbedderBreaker | None:
    """The bound on a question's embedding and the pause after a failure, for a network embedder (a local one
    cannot be down)."""
    if not isinstance(embedder, AsyncEmbedder):
        return None
    return EmbedderBreaker(
        name=getattr(embedder, "endpoint", embedder.name),
        timeout=settings.EMBEDDING_QUERY_TIMEOUT,
        retry_seconds=settings.EMBEDDING_RETRY_SECONDS,
    )


def apply_live_policy(llm: Any, snapshot: Any) -> None:
    """Live settings (rpm, retries, request timeout) into the running backend's policy, validated first.

    Fields are set in place: the RPM limiter reads the policy's config object on every call.
    """
    from rag.llm import CallPolicyConfig  # loads the openai SDK: see the note under the imports

    policy = llm.policy.config
    try:
        updated = CallPolicyConfig(
            rpm={backend: int(snapshot.rpm.get(backend, 0)) for backend in LLM_BACKENDS},
            rpm_window=policy.rpm_window,
            max_attempts=snapshot.retry_max_attempts,
            backoff_base=snapshot.retry_base_seconds,
            backoff_max=snapshot.retry_max_seconds,
            jitter=policy.jitter,
            retry_after_cap=policy.retry_after_cap,
            acquire_timeout=policy.acquire_timeout,
        )
        timeout = float(snapshot.llm_request_timeout)
        if not timeout > 0:
            raise ValueError(f"llm_request_timeout must be > 0, got {timeout}")
    except (TypeError, ValueError) as exc:
        logger.error("live LLM settings v%s refused, keeping the current policy: %s", snapshot.version, exc)
        return
    for item in fields(CallPolicyConfig):
        setattr(policy, item.name, getattr(updated, item.name))
    llm.config.total_timeout = timeout


def follow_live_settings(llm: Any) -> Callable[[], None]:
    """Keep the backend's policy in step with the live settings row; returns the unsubscribe function."""

    return on_settings_applied(lambda snapshot: apply_live_policy(llm, snapshot))


# --- telemetry -------------------------------------------------------------------------------------------------


def apply_live_sample_rate(telemetry: Any, snapshot: Any) -> None:
    """A settings snapshot's telemetry sample rate into the running sampler (refused, and logged, when invalid)."""
    sampler = telemetry.sampler
    try:
        changed = sampler.set_rate(snapshot.telemetry_sample_rate)
    except (TypeError, ValueError) as exc:
        logger.error(
            "live telemetry sample rate v%s refused, keeping %s: %s", snapshot.version, sampler.sample_rate, exc
        )
        return
    if changed:
        logger.info("telemetry sample rate %s (live settings v%s)", sampler.sample_rate, snapshot.version)


def follow_live_sample_rate() -> Callable[[], None]:
    """Keep the process telemetry's sample rate in step with the live settings row; returns the unsubscribe
    function. The callback runs on the event loop, so it never builds the telemetry: one built later takes the
    applied row then (`telemetry_for_deps`)."""

    def apply(snapshot: Any) -> None:
        telemetry = current_telemetry()
        if telemetry is not None:
            apply_live_sample_rate(telemetry, snapshot)

    return on_settings_applied(apply)


def telemetry_for_deps() -> Any:
    """The process telemetry, at the applied live row's sample rate when one was applied (the row wins over
    `LANGFUSE_SAMPLE_RATE`, as for the concurrency limits). Blocking the first time: call it off the event loop."""

    telemetry = get_telemetry()
    applied = None
    # Until stable: a snapshot applied on the loop meanwhile found the telemetry built and set its own rate, and
    # must not be overwritten here by the older one.
    while (live := settings_current()) is not None and live is not applied:
        apply_live_sample_rate(telemetry, live)
        applied = live
    return telemetry


def configure_concurrency_manager() -> Any:
    """The process manager with the limits, priority mode and waiting bounds of the settings; with Redis (and
    `LLM_CLUSTER_LIMITS`), one that draws every permit from the cluster's limit in Redis.

    Skipped when the live settings row has been applied already: it was seeded from these settings and staff
    may have changed it since. Call it on the thread of the event loop that serves requests.
    """

    if settings_current() is None:
        get_manager(
            limits={
                "default": settings.LLM_MAX_CONCURRENT_DEFAULT,
                "chat": settings.LLM_MAX_CONCURRENT_CHAT,
                "responses": settings.LLM_MAX_CONCURRENT_RESPONSES,
                "embedding": settings.LLM_MAX_CONCURRENT_EMBEDDING,
            },
            priority_enabled=settings.LLM_PRIORITY_ENABLED,
            starvation_threshold=settings.LLM_PRIORITY_STARVATION_THRESHOLD,
            acquire_timeout=settings.LLM_ACQUIRE_TIMEOUT,
            max_waiters=settings.LLM_MAX_WAITERS,
        )
    if settings.REDIS_URL and settings.LLM_CLUSTER_LIMITS:
        url, prefix = redis_config()
        return cluster_manager_install(
            RedisPermits(
                redis_url=url,
                prefix=prefix,
                worker_id=worker_id(),
                workers_index_key=workers_index_key(prefix),
                lease_seconds=settings.LLM_PERMIT_LEASE_SECONDS,
            )
        )
    return get_manager()


# --- the runtime -----------------------------------------------------------------------------------------------


def rate_limiter_from_settings() -> RateLimiter:
    """The request rate windows: in Redis with `REDIS_URL` (shared by every worker), else in this process."""
    url, prefix = redis_config()
    return rate_limiter_for(url, prefix=prefix)


def build_deps() -> PipelineDeps:
    """Open the vector store and build every client. Blocking: call it off the event loop."""

    # first: a configuration mistake (or a missing model folder) should not leave the store open and locked
    llm = build_llm_backend()
    embedder = build_embedder(llm)
    mode, search_settings = search_settings_from_settings(embedder)
    store = open_store_from_settings()
    store.sync()  # load the in-memory replica now, not at the first question

    breaker = embedder_breaker_from_settings(embedder)
    deps = PipelineDeps(
        retriever=StoreRetriever(
            store,
            embedder,
            mode=mode,
            encoder=query_encoder_from_settings(),
            settings=search_settings,
            breaker=breaker,
            other_language=other_language_from_settings(),
        ),
        config=pipeline_config_from_settings(),
        rate_limiter=rate_limiter_from_settings(),
        llm=llm,
        telemetry=telemetry_for_deps(),  # process-wide, shut down at exit: not one of the deps' cleanups
        organisation=organisation_source(),
    )
    if llm is not None:
        deps.prompts = OrganisationPrompts(RegistryPrompts(), deps.organisation)
        deps.cleanups.append(follow_live_settings(llm))

        # answers made from the passages while the model failed (only an LLM deployment degrades)
        deps.cleanups.append(register_stats_provider("answers", deps.answer_stats.stats))
        # what the LLM server was found to accept (structured output, stream usage, the Responses API, prefill)
        deps.cleanups.append(register_stats_provider("llm_server", llm.profile.stats))
        logger.info(
            "pipeline LLM: %s (chat model %s, responses model %s)",
            settings.LLM_BASE_URL,
            llm.config.chat_model,
            llm.config.responses_model or llm.config.chat_model,
        )
    embedding_llm = getattr(embedder, "backend", None)
    if embedding_llm is not None and embedding_llm is not llm:
        deps.cleanups.append(follow_live_settings(embedding_llm))
    if breaker is not None:
        deps.cleanups.append(register_stats_provider("embedder", breaker.stats))
    prompts = getattr(embedder, "prompts", None)
    logger.info(
        "retrieval: embedder %s (%s), search mode %s",
        embedder.name,
        prompts.describe() if isinstance(prompts, EmbeddingPrompts) else "no prompts",
        mode,
    )
    if settings.RAG_SEMANTIC_CACHE_ENABLED:
        _attach_semantic_cache(deps, store, embedder)
    if settings.RAG_CURATED_ENABLED:
        _attach_curated_answers(deps, embedder)
    return deps


def _attach_curated_answers(deps: PipelineDeps, embedder: Any) -> None:
    cache = deps.cache
    curated = build_curated_answers(
        embedder,
        threshold=settings.RAG_CURATED_THRESHOLD,
        supersede=cache.supersede if cache is not None else None,
    )
    deps.curated = curated
    deps.cleanups.append(curated.close)
    deps.cleanups.append(register_stats_provider("curated_answers", curated.stats))


def _attach_semantic_cache(deps: PipelineDeps, store: Any, embedder: Any) -> None:

    cache = build_semantic_cache(
        store,
        embedder,
        prompts=deps.prompts,
        threshold=settings.RAG_SEMANTIC_CACHE_THRESHOLD,
        ttl=settings.RAG_SEMANTIC_CACHE_TTL,
    )
    deps.cache = cache
    # Cleanups run last-registered first: pending hit counts are written before the store closes.
    deps.cleanups.append(cache.close)
    deps.cleanups.append(register_stats_provider("semantic_cache", cache.stats))
    deps.cleanups.append(on_documents_reindexed(partial(cache_entries_invalidate_for_documents, cache=cache)))


def get_runtime() -> PipelineRuntime:
    global _runtime, _serving_loop, _unfollow_sample_rate
    # at start-up (warm_up) or in a command there is no running loop; the server's is seen on a later call
    with contextlib.suppress(RuntimeError):
        _serving_loop = asyncio.get_running_loop()
    with _lock:
        if _runtime is None:
            from rag.nodes import build_registry  # loads the openai SDK: see the note under the imports

            configure_concurrency_manager()
            _runtime = PipelineRuntime(
                registry=build_registry(),
                deps_factory=build_deps,
                default_workflow=default_workflow(),
                stream_timeout=settings.RAG_STREAM_TIMEOUT,
                idle_timeout=pipeline_idle_timeout(),
                coalescing=Coalescing(settings.RAG_STREAM_COALESCE_MS / 1000, settings.RAG_STREAM_COALESCE_CHARS),
            )
            register_stats_provider("graph_cache", _runtime.graph_cache.stats)
            register_stats_provider("telemetry_sampler", lambda: get_telemetry().stats())
            _unfollow_sample_rate = follow_live_sample_rate()
        return _runtime


def warm_up() -> None:
    """Open the store and build the pipeline at server start-up, so the server, not a later command, holds the
    embedded store. A failure is logged and left to the first request (which reports it to its client)."""
    try:
        deps = get_runtime().preload()
    except Exception as exc:
        logger.critical(
            "THIS WORKER CANNOT ANSWER: the pipeline could not be built (%s: %s). It is not ready "
            "(/api/v1/ready says why) and every request will try again.",
            type(exc).__name__,
            exc,
            exc_info=True,
        )
        return
    store = getattr(getattr(deps, "retriever", None), "store", None)
    if store is not None and store.is_empty():
        logger.critical(
            "THIS WORKER HAS NO INDEX: the vector store is empty, so it is not ready; run `manage.py reindex`"
        )

    # after the runtime is built: its callbacks (the sample rate) follow the row from the start too
    live_settings_preload()
    warn_environment_differences()


def warn_environment_differences() -> None:
    """Say at start-up where the environment's LLM limits (and the other seeds of the settings row) differ from the
    saved settings, which win: a changed `LLM_MAX_CONCURRENT_CHAT` is otherwise silently ignored."""
    applied = settings_current()
    if applied is None:
        return  # the row could not be read: the environment's values serve until it can
    differences = concurrency_settings_env_differences(snapshot=applied)
    if differences:
        logger.warning(
            "LLM concurrency settings: the environment differs from the saved settings (v%s), which win: %s. "
            "Apply the environment's with `manage.py concurrency_settings --from-env`, or edit them in the console.",
            applied.version,
            "; ".join(str(difference) for difference in differences),
        )


def reset_runtime() -> None:
    """Close the store and forget the runtime (tests, and reindex in the owning process)."""
    global _runtime, _unfollow_sample_rate
    with _lock:
        if _runtime is not None:
            _runtime.close()
        _runtime = None
        if _unfollow_sample_rate is not None:
            _unfollow_sample_rate()
            _unfollow_sample_rate = None
