from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SitesConfig(AppConfig):
    name = "chatbot.sites"
    label = "embed_sites"
    verbose_name = _("Websites")
    default_auto_field = "django.db.models.BigAutoField"
