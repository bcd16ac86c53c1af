from django.apps import AppConfig


class DevtoolsConfig(AppConfig):
    """Installed for its management commands (`simulate_llm`, `loadtest`); it has no models."""

    name = "devtools"
    verbose_name = "Development tools"
