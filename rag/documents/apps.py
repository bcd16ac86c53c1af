from django.apps import AppConfig


class DocumentsConfig(AppConfig):
    name = "rag.documents"
    label = "rag_documents"
    verbose_name = "Documents and index jobs"
    default_auto_field = "django.db.models.BigAutoField"
