from django.apps import AppConfig


class ChatbotConfig(AppConfig):
    name = "chatbot"
    verbose_name = "Chat"
    default_auto_field = "django.db.models.BigAutoField"
