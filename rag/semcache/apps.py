from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SemanticCacheConfig(AppConfig):
    name = "rag.semcache"
    label = "rag_semcache"
    verbose_name = _("Semantic cache")
    default_auto_field = "django.db.models.BigAutoField"
