"""Reading environment variables with errors that name the variable.

django-environ parses; this module turns its (and our) failures into ImproperlyConfigured messages that say
which variable is wrong and why, so a bad deployment stops at start-up instead of misbehaving later.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import environ
from django.core.exceptions import ImproperlyConfigured

env = environ.Env()

_Choice = TypeVar("_Choice", bound=str)


def _fail(name: str, value: object, why: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{name}={value!r} is invalid: {why}")


def env_str(name: str, default: str = "") -> str:
    return str(env.str(name, default=default)).strip()


def env_text(name: str) -> str:
    """A text kept as written, spaces included (a prefix such as "query: " ends with one); only a value that is
    nothing but spaces counts as empty."""
    raw = str(env.str(name, default=""))
    return raw if raw.strip() else ""


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = env.str(name, default="").strip()
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _fail(name, raw, "expected an integer") from None
    if minimum is not None and value < minimum:
        raise _fail(name, raw, f"must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise _fail(name, raw, f"must be <= {maximum}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None, maximum: float | None = None) -> float:
    raw = env.str(name, default="").strip()
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise _fail(name, raw, "expected a number") from None
    if minimum is not None and value < minimum:
        raise _fail(name, raw, f"must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise _fail(name, raw, f"must be <= {maximum}")
    return value


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_bool(name: str, default: bool) -> bool:
    raw = env.str(name, default="").strip().lower()
    if raw == "":
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise _fail(name, raw, "expected one of true/false/1/0/yes/no/on/off")


def env_choice(name: str, default: _Choice, choices: tuple[_Choice, ...]) -> _Choice:
    """One of ``choices`` (typed as them: annotate the setting with their Literal)."""
    raw = env.str(name, default="").strip()
    if raw == "":
        return default
    for choice in choices:
        if raw == choice:
            return choice
    raise _fail(name, raw, f"expected one of {', '.join(choices)}")


def env_url(name: str, *, schemes: tuple[str, ...]) -> str:
    """An optional URL: empty means 'not configured'."""
    raw = env.str(name, default="").strip()
    if raw == "":
        return ""
    parsed = urlparse(raw)
    if parsed.scheme not in schemes or not (parsed.netloc or parsed.path):
        raise _fail(name, raw, f"expected a URL starting with {' or '.join(s + '://' for s in schemes)}")
    return raw


def env_list(name: str, default: list[str]) -> list[str]:
    raw = env.str(name, default="").strip()
    if raw == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def database_from_env(name: str, *, sqlite_path: Path) -> dict[str, Any]:
    raw = env.str(name, default="").strip()
    if raw == "":
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(sqlite_path),
            "OPTIONS": {
                # WAL lets readers run beside the single writer; IMMEDIATE takes the write lock at BEGIN so two
                # writers queue on the busy timeout instead of failing with "database is locked" mid-transaction.
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    if not raw.startswith(("postgres://", "postgresql://", "pgsql://", "sqlite://")):
        raise _fail(name, raw, "expected postgres://user@host:port/name (or sqlite:///path)")
    try:
        return env.db_url_config(raw)
    except Exception as exc:
        raise _fail(name, raw, str(exc)) from None


def secret_key_from_env(name: str, *, key_file: Path) -> str:
    """The secret key from the environment, else one generated once per checkout and kept in var/."""
    raw = env.str(name, default="").strip()
    if raw:
        if len(raw) < 32:
            raise _fail(name, "***", "must be at least 32 characters")
        return raw
    key_file.parent.mkdir(parents=True, exist_ok=True)
    if key_file.exists() and (existing := key_file.read_text().strip()):
        return existing
    # Written whole under another name, then linked into place only if absent: two workers starting together
    # (one wrote the file, the other read it still empty) both end with the one key that won.
    draft = key_file.with_name(f".{key_file.name}.{os.getpid()}")
    draft.write_text(secrets.token_urlsafe(50))
    draft.chmod(0o600)
    try:
        os.link(draft, key_file)
    except FileExistsError:
        if not key_file.read_text().strip():
            # An empty file: an interrupted write of an older version, or a person's `touch`. Never serve with an
            # empty key: put the new one in its place.
            os.replace(draft, key_file)
    finally:
        with contextlib.suppress(FileNotFoundError):
            draft.unlink()
    return key_file.read_text().strip()
