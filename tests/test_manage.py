"""manage.py: a command a person runs prints its own output first, not a library's INFO log line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("command", "own_first_line"),
    [
        (["ask", "--help"], "usage: manage.py ask"),
        # services log to their terminal, but not when asked only for their help
        (["runserver", "--help"], "usage: manage.py runserver"),
        (["simulate_llm", "-h"], "usage: manage.py simulate_llm"),
    ],
)
def test_a_command_prints_its_own_output_first(tmp_path: Path, command: list[str], own_first_line: str) -> None:
    env = {name: value for name, value in os.environ.items() if name != "LOG_TERMINAL_LEVEL"}
    env.update(DJANGO_SETTINGS_MODULE="chatbot.settings", DATA_DIR=str(tmp_path), LOG_LEVEL="INFO")
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *command],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # as a terminal shows them: one stream, in order
        text=True,
        timeout=120,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert done.returncode == 0, done.stdout
    assert lines and lines[0].startswith(own_first_line), done.stdout[:2000]
