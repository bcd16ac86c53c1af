from django.apps import AppConfig


class ConcurrencyConfig(AppConfig):
    name = "concurrency"
    verbose_name = "LLM concurrency"
    default_auto_field = "django.db.models.BigAutoField"
