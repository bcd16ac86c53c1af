from django.apps import AppConfig


class SemanticCacheConfig(AppConfig):
    name = "rag.semcache"
    label = "rag_semcache"
    verbose_name = "Semantic cache"
    default_auto_field = "django.db.models.BigAutoField"
