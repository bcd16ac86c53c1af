from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ApiKeysConfig(AppConfig):
    name = "chatbot.apikeys"
    label = "apikeys"
    verbose_name = _("API keys")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The concurrency APIs know nothing of this app (layers: chatbot -> rag -> concurrency): the check that
        # lets a key with an admin scope in is handed to them here, where the project is assembled. Imported in
        # ready(): the services import this app's models, which cannot load while the app registry is filling.
        from chatbot.apikeys.services import api_key_allows_scope
        from infra.access import bearer_key_checker_set

        bearer_key_checker_set(api_key_allows_scope)
