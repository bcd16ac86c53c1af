"""Seed version 1 of the prompts the catalogue gained after 0002 (the answer judge of `eval_answers --judge`).

0002's function, run again: every catalogue name without a version gets its default and names that exist are
left alone, so a database seeded before the judge existed gains it and nothing else changes.
"""

import importlib

from django.db import migrations

_seed = importlib.import_module("prompts.migrations.0002_seed_prompts")


def unseed_judge(apps, schema_editor):
    Prompt = apps.get_model("prompts", "Prompt")
    Prompt.objects.using(schema_editor.connection.alias).filter(
        name="answer-judge", version=1, note=_seed.SEED_NOTE
    ).delete()


class Migration(migrations.Migration):
    dependencies = [("prompts", "0002_seed_prompts")]

    operations = [migrations.RunPython(_seed.seed_prompts, unseed_judge)]
