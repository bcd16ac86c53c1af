"""System checks: a bad prompt-source setting is reported at start-up, not on the first request; a cache that
cannot carry prompt changes between worker processes is reported by `check --deploy`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS
from django.core.checks import CheckMessage, Error, Tags, register
from django.core.checks import Warning as CheckWarning

from prompts.memory import SOURCES

# Backends whose values no other process sees: a generation bump there never reaches another worker.
PROCESS_LOCAL_CACHES = frozenset(
    {"django.core.cache.backends.locmem.LocMemCache", "django.core.cache.backends.dummy.DummyCache"}
)


@register()
def prompt_settings_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    problems: list[CheckMessage] = []
    source = getattr(settings, "PROMPT_SOURCE", "database") or "database"
    if source not in SOURCES:
        problems.append(
            Error(
                f"PROMPT_SOURCE={source!r} is not one of {', '.join(SOURCES)}",
                hint="Use 'database' (the default) or 'langfuse'.",
                id="prompts.E001",
            )
        )
    elif source == "langfuse" and not (
        getattr(settings, "LANGFUSE_PUBLIC_KEY", "") and getattr(settings, "LANGFUSE_SECRET_KEY", "")
    ):
        problems.append(
            CheckWarning(
                "PROMPT_SOURCE='langfuse' but LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY are not set",
                hint="Prompts are served from the database until the keys are configured.",
                id="prompts.W001",
            )
        )
    for name in ("PROMPT_CACHE_CHECK_INTERVAL", "PROMPT_LANGFUSE_TIMEOUT", "PROMPT_LANGFUSE_CACHE_TTL"):
        value = getattr(settings, name, None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
            problems.append(Error(f"{name}={value!r} must be a positive number of seconds", id="prompts.E002"))
    return problems


@register(Tags.caches, deploy=True)
def prompt_cache_deploy_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    # How many worker processes will run is not a setting here (daphne, a process manager, replicas), so a
    # deployment check says what a process-local cache means for prompts rather than guessing.
    backend = (getattr(settings, "CACHES", {}).get(DEFAULT_CACHE_ALIAS) or {}).get("BACKEND", "")
    if backend not in PROCESS_LOCAL_CACHES:
        return []
    return [
        CheckWarning(
            f"The default cache ({backend.rsplit('.', 1)[-1]}) is local to each process: a prompt edited, promoted "
            "or rolled back in the admin reaches only the worker that saved it; other workers keep serving the "
            "prompts they hold until they restart.",
            hint="Fine with a single worker process. With several workers set REDIS_URL (a shared cache), so "
            "every worker picks up a prompt change within PROMPT_CACHE_CHECK_INTERVAL seconds.",
            id="prompts.W002",
        )
    ]
