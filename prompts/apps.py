from django.apps import AppConfig


class PromptsConfig(AppConfig):
    name = "prompts"
    verbose_name = "Prompts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from prompts import checks  # noqa: F401 - registers the system checks
