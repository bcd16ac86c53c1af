from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BrandingConfig(AppConfig):
    name = "rag.branding"
    label = "rag_branding"
    verbose_name = _("Organisation")
    default_auto_field = "django.db.models.BigAutoField"
