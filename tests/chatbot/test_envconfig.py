"""Environment variables read with errors that name the variable."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from chatbot.envconfig import env_choice, secret_key_from_env


def test_a_choice_is_its_default_when_unset_and_one_of_its_values_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLM_HTTP_CLIENT", raising=False)
    assert env_choice("LLM_HTTP_CLIENT", "httpx", ("httpx", "aiohttp")) == "httpx"
    monkeypatch.setenv("LLM_HTTP_CLIENT", " aiohttp ")
    assert env_choice("LLM_HTTP_CLIENT", "httpx", ("httpx", "aiohttp")) == "aiohttp"


def test_a_value_not_among_the_choices_names_the_variable_and_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_HTTP_CLIENT", "curl")
    with pytest.raises(
        ImproperlyConfigured, match=r"LLM_HTTP_CLIENT='curl' is invalid: expected one of httpx, aiohttp"
    ):
        env_choice("LLM_HTTP_CLIENT", "httpx", ("httpx", "aiohttp"))


def test_a_secret_key_is_generated_once_and_kept(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv("TEST_SECRET_KEY", raising=False)
    key_file = tmp_path / "var" / "secret_key"

    first = secret_key_from_env("TEST_SECRET_KEY", key_file=key_file)

    assert len(first) >= 50 and key_file.read_text() == first
    assert secret_key_from_env("TEST_SECRET_KEY", key_file=key_file) == first
    assert [p.name for p in key_file.parent.iterdir()] == ["secret_key"]  # no draft left behind


def test_an_empty_key_file_is_replaced_not_served(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv("TEST_SECRET_KEY", raising=False)
    key_file = tmp_path / "secret_key"
    key_file.write_text("\n")  # left by an interrupted write

    key = secret_key_from_env("TEST_SECRET_KEY", key_file=key_file)

    assert len(key) >= 50 and key_file.read_text() == key
    assert [p.name for p in tmp_path.iterdir()] == ["secret_key"]


def test_a_secret_key_from_the_environment_must_be_long_enough(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("TEST_SECRET_KEY", "short")
    with pytest.raises(ImproperlyConfigured, match=r"TEST_SECRET_KEY.*at least 32"):
        secret_key_from_env("TEST_SECRET_KEY", key_file=tmp_path / "unused")
