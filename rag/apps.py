from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class RagConfig(AppConfig):
    name = "rag"
    verbose_name = _("Retrieval pipeline")
    default_auto_field = "django.db.models.BigAutoField"
