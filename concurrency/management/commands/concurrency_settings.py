"""`manage.py concurrency_settings [--from-env [--dry-run]]`: the saved LLM concurrency settings against the
environment.

The environment's `LLM_MAX_CONCURRENT_*` (and the other variables of the settings row) seed the row once, when it is
first used; after that the saved row wins, and staff change it in the concurrency console. Without options this
lists where the environment says otherwise; `--from-env` saves the environment's values over the row, through the
settings service, so every running worker applies them within a second (`--dry-run` says what it would change).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from concurrency.selectors import concurrency_settings_env_differences, concurrency_settings_snapshot
from concurrency.services import concurrency_settings_from_environment


class Command(BaseCommand):
    help = "Compare the saved LLM concurrency settings with the environment; --from-env applies the environment's."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--from-env", action="store_true", help="save the environment's values over the settings row (live)"
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="with --from-env: say what would change, save nothing"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["from_env"]:
            snapshot = concurrency_settings_snapshot()
            differences = concurrency_settings_env_differences(snapshot=snapshot)
            self.stdout.write(f"saved LLM concurrency settings: version {snapshot.version}")
            if not differences:
                self.stdout.write("the environment agrees with them (or sets none of them)")
            for difference in differences:
                self.stdout.write(f"  {difference} -- the saved value wins")
            if differences:
                self.stdout.write("apply the environment's values with: manage.py concurrency_settings --from-env")
            return
        try:
            row, differences = concurrency_settings_from_environment(dry_run=options["dry_run"])
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        if not differences:
            self.stdout.write(f"nothing to apply: the saved settings (version {row.version}) match the environment")
            return
        for difference in differences:
            change = f"{difference.saved} -> {difference.environment}"
            self.stdout.write(f"  {difference.field}: {change} ({difference.variable})")
        if options["dry_run"]:
            self.stdout.write(f"dry run: version {row.version} left as it is")
        else:
            self.stdout.write(f"saved as version {row.version}: every worker applies it within a second")
