import uuid

import pytest
from django.core.exceptions import ImproperlyConfigured

from rag.telemetry import build_telemetry_from_settings, get_telemetry, reset_telemetry
from tests.rag.telemetry.capture import CaptureServer


@pytest.fixture
def keys(settings):
    settings.LANGFUSE_PUBLIC_KEY = f"pk-lf-settings-{uuid.uuid4().hex[:8]}"
    settings.LANGFUSE_SECRET_KEY = "sk-lf-settings"
    return settings


@pytest.mark.parametrize(
    ("mode", "exporter_class"), [("process", "LangfuseProcessExporter"), ("thread", "LangfuseExporter")]
)
def test_both_keys_switch_telemetry_on_with_the_configured_exporter_and_rate(keys, mode, exporter_class):
    with CaptureServer() as server:
        keys.LANGFUSE_HOST = server.url
        keys.LANGFUSE_SAMPLE_RATE = 0.25
        keys.TELEMETRY_QUEUE_SIZE = 7
        keys.TELEMETRY_EXPORTER = mode
        telemetry = build_telemetry_from_settings()
        try:
            assert telemetry.enabled
            assert type(telemetry.exporter).__name__ == exporter_class
            assert telemetry.sampler.sample_rate == 0.25
            assert telemetry.stats()["export"]["queue_size"] == 7
        finally:
            telemetry.shutdown(5)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TELEMETRY_QUEUE_SIZE", 0),
        ("TELEMETRY_QUEUE_SIZE", "many"),
        ("TELEMETRY_EXPORTER", "carrier-pigeon"),
        ("LANGFUSE_FLUSH_AT", 100_000),
    ],
)
def test_a_bad_value_fails_at_start_naming_it(keys, name, value):
    keys.LANGFUSE_HOST = "http://127.0.0.1:9"  # never contacted: the build fails first
    keys.TELEMETRY_EXPORTER = "process"  # the SDK's own check runs in the child and fails here all the same
    setattr(keys, name, value)
    with pytest.raises(ImproperlyConfigured, match=name if name != "LANGFUSE_FLUSH_AT" else "Langfuse"):
        build_telemetry_from_settings().shutdown(1)


def test_the_process_shares_one_telemetry_until_reset(settings):
    settings.LANGFUSE_PUBLIC_KEY = settings.LANGFUSE_SECRET_KEY = ""
    reset_telemetry()
    try:
        assert get_telemetry() is get_telemetry()
        first = get_telemetry()
        reset_telemetry()
        assert get_telemetry() is not first
    finally:
        reset_telemetry()
