"""Environment variables read with errors that name the variable."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from chatbot.envconfig import env_choice


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
