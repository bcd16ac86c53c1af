from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ConcurrencyConfig(AppConfig):
    name = "concurrency"
    verbose_name = _("LLM concurrency")
    default_auto_field = "django.db.models.BigAutoField"
