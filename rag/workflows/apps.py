from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WorkflowsConfig(AppConfig):
    name = "rag.workflows"
    label = "rag_workflows"
    verbose_name = _("Workflows")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # a prompt version becomes production only past the test set, as a workflow draft does
        from prompts.services import prompt_publish_gate_register
        from rag.workflows.checks import prompt_publish_gate

        prompt_publish_gate_register(prompt_publish_gate)
