#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys

# Commands that run as services write their log to the terminal they run in, as the server does; every other command
# (and a service asked for its help or version) prints its own output only, and what libraries log at INFO goes to
# DATA_DIR/logs/commands.log.
SERVICE_COMMANDS = frozenset({"runserver", "run_jobs", "simulate_llm"})
ASKING_ONLY = frozenset({"-h", "--help", "--version"})


def runs_as_service(argv: list[str]) -> bool:
    return len(argv) > 1 and argv[1] in SERVICE_COMMANDS and not ASKING_ONLY.intersection(argv[2:])


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbot.settings")
    # One BLAS thread: see chatbot/asgi.py. Set before numpy is imported.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if not runs_as_service(sys.argv):
        os.environ.setdefault("LOG_TERMINAL_LEVEL", "WARNING")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
