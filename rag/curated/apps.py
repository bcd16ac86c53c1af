from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class CuratedConfig(AppConfig):
    name = "rag.curated"
    label = "rag_curated"
    verbose_name = _("Curated answers")
    default_auto_field = "django.db.models.BigAutoField"
