"""The ASGI module as a worker imports it: what start-up made is frozen, so a full garbage collection under load
no longer walks it (it took ~140 ms of CPU on the event loop's thread; docs/benchmarks/streaming_load.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, json
import chatbot.asgi
print(json.dumps({"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}))
"""


def test_the_start_up_heap_is_frozen_and_nothing_is_left_for_a_full_collection(tmp_path: Path) -> None:
    env = {**os.environ, "DATA_DIR": str(tmp_path), "DATABASE_URL": "", "REDIS_URL": "", "RAG_PRELOAD": "false"}
    env["DJANGO_SETTINGS_MODULE"] = "chatbot.settings"
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    # Django, Channels and the SDK alone are well over 100,000 objects; all of them frozen, none left tracked.
    assert figures["frozen"] > 100_000, figures
    assert figures["tracked"] < 1_000, figures
