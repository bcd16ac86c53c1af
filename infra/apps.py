from django.apps import AppConfig


class InfraConfig(AppConfig):
    """Shared infrastructure under every app (an app so that it may hold tables of its own)."""

    name = "infra"
    verbose_name = "Infrastructure"
    default_auto_field = "django.db.models.BigAutoField"
