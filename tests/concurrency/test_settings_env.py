"""The environment variables that seed the LLM concurrency settings, under the seed design's names, read by a
fresh process at start-up: the seeded settings row and the process manager follow them, and a bad value stops
start-up with a message naming the variable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parents[2]

SEED = {
    "LLM_MAX_CONCURRENT_DEFAULT": "3",
    "LLM_MAX_CONCURRENT_CHAT": "5",
    "LLM_MAX_CONCURRENT_RESPONSES": "6",
    "LLM_MAX_CONCURRENT_EMBEDDING": "7",
    "LLM_REQUEST_TIMEOUT": "42.5",
    "LLM_PRIORITY_ENABLED": "true",
    "LLM_PRIORITY_STARVATION_THRESHOLD": "2.5",
    "LANGFUSE_SAMPLE_RATE": "0.25",
}
BAD = {
    "LLM_MAX_CONCURRENT_DEFAULT": "0",
    "LLM_MAX_CONCURRENT_CHAT": "many",
    "LLM_MAX_CONCURRENT_RESPONSES": "-1",
    "LLM_MAX_CONCURRENT_EMBEDDING": "5000",
    "LLM_REQUEST_TIMEOUT": "0",
    "LLM_PRIORITY_ENABLED": "maybe",
    "LLM_PRIORITY_STARVATION_THRESHOLD": "-1",
    "LANGFUSE_SAMPLE_RATE": "1.5",
}

# Runs in a fresh interpreter with SEED in its environment. Start-up (django.setup) reads the settings once; the
# settings module is then run again per bad value, which is what a start-up with that value would run first.
SCRIPT = """
import json, os, runpy, sys
import django
django.setup()
from django.core.exceptions import ImproperlyConfigured
from concurrency.models import ConcurrencySettings
from concurrency.selectors import concurrency_settings_defaults
from rag.wiring import configure_concurrency_manager, llm_config_from_settings

settings_file = sys.modules["chatbot.settings"].__file__

defaults = concurrency_settings_defaults()
ConcurrencySettings(pk=1, **defaults).full_clean(exclude=["updated_by"], validate_unique=False)
manager = configure_concurrency_manager().stats()
refused = {}
for name, value in json.loads(sys.argv[1]).items():
    good = os.environ[name]
    os.environ[name] = value
    try:
        runpy.run_path(settings_file)
    except ImproperlyConfigured as exc:
        refused[name] = str(exc)
    else:
        refused[name] = None
    finally:
        os.environ[name] = good
print(json.dumps({
    "defaults": defaults,
    "manager": {
        "mode": manager["mode"],
        "starvation_threshold": manager["starvation_threshold"],
        "limits": {name: backend["limit"] for name, backend in manager["backends"].items()},
    },
    "request_timeout": llm_config_from_settings().total_timeout,
    "refused": refused,
}))
"""


def start_up(tmp_path: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        **SEED,
        "DJANGO_SETTINGS_MODULE": "chatbot.settings",
        "DATA_DIR": str(tmp_path),
        "LLM_BASE_URL": "http://127.0.0.1:9/v1",  # never called: only the client's settings are read
    }
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(BAD)],
        cwd=PROJECT_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_the_seed_variables_set_the_defaults_and_a_bad_one_stops_start_up_naming_it(tmp_path: Path) -> None:
    seen = start_up(tmp_path)

    defaults = seen["defaults"]
    assert {key: defaults[key] for key in ("limit_default", "limit_chat", "limit_responses", "limit_embedding")} == {
        "limit_default": 3,
        "limit_chat": 5,
        "limit_responses": 6,
        "limit_embedding": 7,
    }
    assert defaults["llm_request_timeout"] == 42.5
    assert defaults["priority_enabled"] is True
    assert defaults["starvation_threshold"] == 2.5
    assert defaults["telemetry_sample_rate"] == 0.25
    # The process manager and the LLM client are built from the same variables before any row is applied.
    assert seen["manager"] == {
        "mode": "priority",
        "starvation_threshold": 2.5,
        "limits": {"default": 3, "chat": 5, "responses": 6, "embedding": 7},
    }
    assert seen["request_timeout"] == 42.5

    for name, value in BAD.items():
        message = seen["refused"][name]
        assert message is not None, f"{name}={value!r} was accepted"
        assert message.startswith(f"{name}={value!r} is invalid"), message
