from django.core.checks import run_checks

from prompts.checks import prompt_settings_check


def test_defaults_pass(settings):
    assert prompt_settings_check() == []


def test_unknown_source_and_bad_interval_are_errors(settings):
    settings.PROMPT_SOURCE = "lanfguse"
    settings.PROMPT_LANGFUSE_TIMEOUT = 0
    assert [m.id for m in prompt_settings_check()] == ["prompts.E001", "prompts.E002"]


def test_langfuse_source_without_keys_is_a_warning(settings):
    settings.PROMPT_SOURCE = "langfuse"
    settings.LANGFUSE_PUBLIC_KEY = ""
    assert [m.id for m in prompt_settings_check()] == ["prompts.W001"]


def test_prompt_changes_need_no_deployment_check_of_the_cache(settings):
    # They reach every worker through the change feed, whatever the cache.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    assert not {m.id for m in run_checks(include_deployment_checks=True)} & {"prompts.W002"}
