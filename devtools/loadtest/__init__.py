"""`manage.py loadtest`: simulated chat users against a deployment, for capacity planning (see the command)."""
