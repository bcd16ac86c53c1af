from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DocumentsConfig(AppConfig):
    name = "rag.documents"
    label = "rag_documents"
    verbose_name = _("Documents and index jobs")
    default_auto_field = "django.db.models.BigAutoField"
