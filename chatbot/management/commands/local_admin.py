"""Create the local admin login on first run and print it (never a fixed default password)."""

from __future__ import annotations

import json
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

CREDENTIALS_FILE = "admin_credentials.json"


class Command(BaseCommand):
    help = "Create a local superuser with a random password on first run; print the login."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args: object, **options: object) -> None:
        user_model = get_user_model()
        path = settings.DATA_DIR / CREDENTIALS_FILE
        username = str(options["username"])
        if path.exists():
            saved = json.loads(path.read_text())
            user = user_model.objects.filter(username=saved["username"]).first()
            if user is not None and user.check_password(saved["password"]):
                self._print(saved["username"], saved["password"])
                return
        if user_model.objects.filter(is_superuser=True).exists():
            self.stdout.write("Admin login: an administrator already exists (its password is the one you set).")
            return
        password = secrets.token_urlsafe(12)
        user_model.objects.create_superuser(username=username, email="", password=password)
        path.write_text(json.dumps({"username": username, "password": password}))
        path.chmod(0o600)
        self._print(username, password)

    def _print(self, username: str, password: str) -> None:
        self.stdout.write(f"Admin login: {username} / {password}   (kept in {settings.DATA_DIR / CREDENTIALS_FILE})")
