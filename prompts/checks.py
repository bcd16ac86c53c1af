"""System checks: a bad prompt-source setting is reported at start-up, not on the first request. (Prompt changes
reach every worker through the change feed, whatever the cache: no deployment check is needed for them.)"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register
from django.core.checks import Warning as CheckWarning

from prompts.memory import SOURCES


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
    for name in ("PROMPT_LANGFUSE_TIMEOUT", "PROMPT_LANGFUSE_CACHE_TTL"):
        value = getattr(settings, name, None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
            problems.append(Error(f"{name}={value!r} must be a positive number of seconds", id="prompts.E002"))
    return problems
