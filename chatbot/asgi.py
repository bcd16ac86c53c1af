"""ASGI entry point (`daphne chatbot.asgi:application`): Channels for WebSocket and SSE, Django for the rest."""

from __future__ import annotations

import gc
import os
from pathlib import Path

# One BLAS thread: dense search in local mode multiplies small matrices per request, and a thread pool per call
# made it ten times slower on a busy machine (docs/benchmarks/retrieval.md). Set before numpy is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbot.settings")

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

# Django is set up here, before the routing imports the consumers and, through them, the models.
# The static files handler serves the admin's CSS/JS from the app directories (no collectstatic, no second
# server), which is what `make run` needs; behind a proxy in production the proxy serves STATIC_ROOT instead.
django_application = ASGIStaticFilesHandler(get_asgi_application())

from chatbot.gaps_task import gaps_refresh_task  # noqa: E402
from chatbot.retention import retention_task  # noqa: E402
from chatbot.routing import build_application  # noqa: E402 (needs Django set up)
from chatbot.sites.selectors import memory as sites_memory  # noqa: E402
from concurrency.live import (  # noqa: E402
    SETTINGS_TOPIC,
    live_settings_enabled,
    register_stats_provider,
    settings_follow,
    worker_stats_task,
)
from infra.changefeed import change_watch_stats, change_watch_task, on_change  # noqa: E402
from infra.worker_tasks import WorkerTasksMiddleware  # noqa: E402
from prompts.memory import PROMPTS_TOPIC, prompts_follow  # noqa: E402
from rag.branding.memory import memory as branding_memory  # noqa: E402
from rag.documents.runner import job_runner_task  # noqa: E402
from rag.provider import provide_runtime  # noqa: E402
from rag.replica import REPLICA_TIMEOUT, REPLICA_TOPICS, replica_follow, replica_sync_enabled  # noqa: E402
from rag.wiring import get_runtime, warm_up  # noqa: E402
from rag.workflows.live import (  # noqa: E402
    WORKFLOWS_TOPIC,
    workflow_follow,
    workflow_sync_enabled,
    workflow_sync_preload,
)

# The pipeline runtime, built from the settings at its first use, for what serves here: the exchanges, the
# background tasks below, the staff's test runs.
provide_runtime(get_runtime)

# What each worker follows through the change feed (infra.changefeed): a topic published after a committed change,
# and the handler that takes it in here. One watcher per worker runs them all.
on_change(SETTINGS_TOPIC, settings_follow, enabled=live_settings_enabled)
on_change(WORKFLOWS_TOPIC, workflow_follow, enabled=workflow_sync_enabled)
on_change(PROMPTS_TOPIC, prompts_follow)
on_change(branding_memory.topic, branding_memory.drop)
on_change(sites_memory.topic, sites_memory.drop)
for topic in REPLICA_TOPICS:
    on_change(topic, replica_follow, enabled=replica_sync_enabled, timeout=REPLICA_TIMEOUT)
register_stats_provider("change_feed", change_watch_stats)

# Each worker runs its background tasks, started on its first connection (daphne has no start-up hook), each
# unless its setting switches it off: the change feed's watcher (a saved setting, a published workflow, a reindex,
# a cached or curated answer from any worker reach this one within a second), the stats heartbeat (with Redis: the
# console lists every worker), the job runner (index and backfill jobs, claimed one at a time by whichever worker is
# free), the hourly purge of conversations their visitors deleted past the retention period, and the gaps refresh.
application = WorkerTasksMiddleware(
    build_application(django_application),
    [
        change_watch_task,
        worker_stats_task,
        job_runner_task,
        retention_task,
        gaps_refresh_task,
    ],
)

import sys  # noqa: E402

from django.conf import settings  # noqa: E402

from chatbot.drain import install_under_daphne  # noqa: E402

# SIGTERM drains the answers running here before daphne stops (chatbot.drain); daphne's own handling would cut them.
install_under_daphne(settings.SHUTDOWN_DRAIN_SECONDS)

from chatbot.http_reasons import reason_phrases_install  # noqa: E402

# "429 Too Many Requests", not daphne's "429 Unknown Status".
reason_phrases_install()

from rag.server_address import daphne_url, server_file_write  # noqa: E402

if Path(sys.argv[0]).name == "daphne" or Path(sys.argv[0]).parent.name == "daphne":
    # Tell the commands (`ask`, `reindex`, `backfill`) where this server listens: DATA_DIR/server.json.
    server_file_write(settings.DATA_DIR, daphne_url(sys.argv[1:]))

if settings.LLM_BASE_URL and settings.LLM_HTTP_CLIENT == "aiohttp":
    # The LLM clients' HTTP stack, loaded now (and frozen below with the rest) instead of on the first question.
    import rag.llm.aiohttp_transport  # noqa: F401

if settings.RAG_PRELOAD:
    # Open the store and load its replica at start-up, so the first question does not wait for it.
    warm_up()
    workflow_sync_preload()

# What start-up made (Django, the SDK's types, the pipeline, the replica: some 230,000 objects) lives as long as the
# worker. A full garbage collection walked all of it, ~140 ms of CPU in one piece on the thread that runs the event
# loop, so every stream here stalled whenever one ran under load (the loop-lag probe's max in
# docs/benchmarks/streaming_load.md). Collected once, then frozen, it is never walked again; objects made later
# are collected as before.
gc.collect()
gc.freeze()
