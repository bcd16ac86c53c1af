#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys

# Commands that run as services write their log to the terminal they run in, as the server does; every other command
# prints its own output only, and what libraries log at INFO goes to DATA_DIR/logs/commands.log.
SERVICE_COMMANDS = frozenset({"runserver", "run_jobs", "simulate_llm"})


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatbot.settings")
    # One BLAS thread: see chatbot/asgi.py. Set before numpy is imported.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if len(sys.argv) < 2 or sys.argv[1] not in SERVICE_COMMANDS:
        os.environ.setdefault("LOG_TERMINAL_LEVEL", "WARNING")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
