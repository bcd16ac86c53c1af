from django.core.checks import run_checks

from prompts.checks import prompt_cache_deploy_check, prompt_settings_check


def test_defaults_pass(settings):
    assert prompt_settings_check() == []


def test_unknown_source_and_bad_interval_are_errors(settings):
    settings.PROMPT_SOURCE = "lanfguse"
    settings.PROMPT_CACHE_CHECK_INTERVAL = 0
    assert [m.id for m in prompt_settings_check()] == ["prompts.E001", "prompts.E002"]


def test_langfuse_source_without_keys_is_a_warning(settings):
    settings.PROMPT_SOURCE = "langfuse"
    settings.LANGFUSE_PUBLIC_KEY = ""
    assert [m.id for m in prompt_settings_check()] == ["prompts.W001"]


LOCMEM = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
REDIS = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:6379"}}


def test_a_process_local_cache_is_a_deployment_warning_about_prompt_changes_across_workers(settings):
    settings.CACHES = LOCMEM
    [warning] = prompt_cache_deploy_check()
    assert warning.id == "prompts.W002"
    assert "LocMemCache" in warning.msg and "other workers" in warning.msg
    assert warning.hint is not None and "REDIS_URL" in warning.hint


def test_a_shared_cache_passes_the_deployment_check(settings):
    settings.CACHES = REDIS
    assert prompt_cache_deploy_check() == []


def test_the_cache_warning_is_reported_by_check_deploy_only(settings):
    settings.CACHES = LOCMEM
    assert "prompts.W002" in {m.id for m in run_checks(include_deployment_checks=True)}
    assert "prompts.W002" not in {m.id for m in run_checks()}
