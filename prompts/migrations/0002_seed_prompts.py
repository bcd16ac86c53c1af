"""Seed version 1 of every catalogue prompt, labelled production + latest.

The texts come from `prompts.catalogue` as it is when the migration runs; a name that already has a version
is left alone, so the migration is safe on a database that was seeded another way.
"""

from django.db import migrations

SEED_NOTE = "Default from the prompt catalogue"


def seed_prompts(apps, schema_editor):
    from prompts.catalogue import CATALOGUE, LATEST, PRODUCTION

    Prompt = apps.get_model("prompts", "Prompt")
    db = schema_editor.connection.alias
    existing = set(Prompt.objects.using(db).values_list("name", flat=True).distinct())
    Prompt.objects.using(db).bulk_create(
        [
            Prompt(
                name=spec.name,
                version=1,
                labels=[PRODUCTION, LATEST],
                template=spec.template,
                config=dict(spec.config),
                note=SEED_NOTE,
            )
            for spec in CATALOGUE.values()
            if spec.name not in existing
        ]
    )


def unseed_prompts(apps, schema_editor):
    Prompt = apps.get_model("prompts", "Prompt")
    Prompt.objects.using(schema_editor.connection.alias).filter(version=1, note=SEED_NOTE).delete()


class Migration(migrations.Migration):
    dependencies = [("prompts", "0001_initial")]

    operations = [migrations.RunPython(seed_prompts, unseed_prompts)]
