"""Imported spawn runs of extra VMAs stored as spawn-vmas-0: renamed to their own series.

Before kperf read the extra-VMA count from the logs, every imported spawn
sample was named spawn-vmas-0, so importing kperf's own export of a run with
1000 extra VMAs (run directory spawn-vmas-1000) put forks/s of a 1000-VMA
parent into the 0-VMA series. The files are gone (an import keeps only their
names); what is left is the run's name, which the export gives as
spawn-vmas-<extra> from the very count it writes into the files, so those
samples move to spawn-vmas-<extra>. A run of any other name (mmtests' own,
whose UnixBench spawn holds no extra VMAs) is left as it is.

The moved jobs leave SummarisedJob: the next read of the history recomputes
their kernel's runs (kperf.core.results.summaries.summarise), which takes the samples
out of the 0-VMA series' summaries and noise pools.
"""

import re

from django.db import migrations

EXPORTED_RUN = re.compile(r"spawn-vmas-(0|[1-9][0-9]*)")


def rename_imported_spawn_samples(apps, schema_editor):
    Job = apps.get_model("core", "Job")
    Sample = apps.get_model("core", "Sample")
    MetricDef = apps.get_model("core", "MetricDef")
    try:
        SummarisedJob = apps.get_model("core", "SummarisedJob")
    except LookupError:  # models from 0029 on, where it is Job.summarised (the tests run this on them)
        SummarisedJob = None
    imported = Job.objects.filter(benchmark="spawn", grid="mmtests-import", build__config_digest="imported:mmtests")
    for job in imported:
        run = job.params.get("run", "") if isinstance(job.params, dict) else ""
        match = EXPORTED_RUN.fullmatch(str(run))
        if match is None or match[1] == "0":
            continue
        metric = f"spawn-vmas-{match[1]}"
        if not Sample.objects.filter(boot_record__job=job, metric="spawn-vmas-0").update(metric=metric):
            continue
        MetricDef.objects.get_or_create(
            name=metric, defaults={"benchmark": "spawn", "unit": "forks/s", "higher_is_better": True}
        )
        # Said on the job, so whoever reads it knows the name came from the run's, not from the logs.
        job.params = {**job.params, "renamed": f"spawn-vmas-0 -> {metric} (from the run's name, migration 0020)"}
        job.save(update_fields=["params"])
        if SummarisedJob is not None:
            SummarisedJob.objects.filter(job_id=job.pk).delete()
        else:
            Job.objects.filter(pk=job.pk).update(summarised=False)


class Migration(migrations.Migration):
    dependencies = [("core", "0019_series_apply_attempts")]

    operations = [
        # Migrating back keeps the new names: the old one merged two series, nothing wants it back.
        migrations.RunPython(rename_imported_spawn_samples, migrations.RunPython.noop),
    ]
