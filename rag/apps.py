from django.apps import AppConfig


class RagConfig(AppConfig):
    name = "rag"
    verbose_name = "Retrieval pipeline"
    default_auto_field = "django.db.models.BigAutoField"
