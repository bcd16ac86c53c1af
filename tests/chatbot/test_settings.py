"""The settings in production: deploy/production.env passes `manage.py check --deploy` without a warning; a bad value
stops start-up naming its variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def production_env(data_dir: Path) -> dict[str, str]:
    """The variables of deploy/production.env, read as `env $(grep -v '^#' ... | xargs)` reads them."""
    lines = (ROOT / "deploy" / "production.env").read_text(encoding="utf-8").splitlines()
    pairs = [line.split("=", 1) for line in lines if line.strip() and not line.startswith("#")]
    assert all(" " not in value for _name, value in pairs), "a value with a space breaks the xargs reading"
    keep = {"PATH", "HOME", "LANG", "VIRTUAL_ENV"}
    env = {name: value for name, value in os.environ.items() if name in keep}
    return {**env, **dict(pairs), "DATA_DIR": str(data_dir)}


def test_check_deploy_is_clean_with_the_production_env(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=production_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout and "WARNINGS" not in done.stderr


def test_a_bad_llm_http_client_stops_start_up_naming_the_variable(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "chatbot.settings",
            "DATA_DIR": str(tmp_path),
            "LLM_HTTP_CLIENT": "curl",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "LLM_HTTP_CLIENT='curl' is invalid: expected one of httpx, aiohttp" in done.stderr
