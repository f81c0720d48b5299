from django.db import migrations, models

# Rows that two readers recorded for one Message-ID before the constraint
# (the race it closes): the later ones keep their outcome and say so, without the Message-ID.
_DEDUPLICATE = """
UPDATE core_inboundmail m
   SET detail = 'Message-ID ' || m.message_id || ' was also recorded as mail ' || (
           SELECT min(o.id) FROM core_inboundmail o WHERE o.message_id = m.message_id
       ) || '. ' || m.detail,
       message_id = ''
 WHERE m.message_id <> ''
   AND EXISTS (SELECT 1 FROM core_inboundmail o WHERE o.message_id = m.message_id AND o.id < m.id)
"""


class Migration(migrations.Migration):
    dependencies = [("core", "0017_mail_replies")]
    operations: list[migrations.operations.base.Operation] = [
        migrations.RunSQL(_DEDUPLICATE, migrations.RunSQL.noop),
        migrations.RemoveIndex(model_name="inboundmail", name="inbound_mail_msgid_idx"),
        migrations.AddConstraint(
            model_name="inboundmail",
            constraint=models.UniqueConstraint(
                condition=models.Q(("message_id", ""), _negated=True),
                fields=("message_id",),
                name="inbound_mail_unique_msgid",
            ),
        ),
        migrations.CreateModel(
            name="UnreadableMail",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("key", models.CharField(max_length=320, unique=True)),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("error", models.TextField(blank=True, default="")),
                ("first", models.DateTimeField(auto_now_add=True)),
                ("last", models.DateTimeField(auto_now=True)),
            ],
        ),
    ]
