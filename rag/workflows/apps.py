from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WorkflowsConfig(AppConfig):
    name = "rag.workflows"
    label = "rag_workflows"
    verbose_name = _("Workflows")
    default_auto_field = "django.db.models.BigAutoField"
