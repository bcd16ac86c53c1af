"""The Makefile's two entry points install what each needs: `make run` the runtime alone, `make test` the tools."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def planned_commands(target: str) -> list[str]:
    """What `make TARGET` would run on a fresh clone (-B: as if nothing were installed yet; -n: run nothing)."""
    done = subprocess.run(
        ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout.splitlines()


def installs(commands: list[str]) -> list[str]:
    return [line.split(" -r ", 1)[1] for line in commands if "pip install" in line and " -r " in line]


def test_make_run_installs_the_runtime_requirements_only() -> None:
    commands = planned_commands("run")
    assert installs(commands) == ["requirements.txt"]
    assert any("daphne" in line for line in commands)


def test_make_test_installs_the_dev_tools_too() -> None:
    assert installs(planned_commands("test")) == ["requirements.txt", "requirements-dev.txt"]


def test_the_runtime_requirements_hold_no_test_tool() -> None:
    runtime = (ROOT / "requirements.txt").read_text().lower()
    for tool in ("pytest", "playwright", "ruff", "mypy", "import-linter", "django-stubs"):
        assert tool not in runtime, tool
