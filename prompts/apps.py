from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PromptsConfig(AppConfig):
    name = "prompts"
    verbose_name = _("Prompts")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from prompts import checks  # noqa: F401 - registers the system checks
