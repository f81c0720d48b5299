"""Plain-text mail: a submission's answer to its owner, a tracked branch's regressions to its watchers.

Alerts are rows written in the transaction that decides what they report
(`Alert`, an outbox); `send_pending` delivers them over SMTP from a task and
retries what failed, so a mail server that is down or not configured yet
loses nothing. Bodies are plain text and at most 80 columns where kperf
controls the layout, as mail on kernel lists is.
"""

from __future__ import annotations

import logging
import textwrap
from collections import Counter

from django.conf import settings
from django.contrib.auth.models import User
from django.core.mail import EmailMessage, get_connection
from django.db import transaction
from django.utils import timezone

from kperf.core.builds import configs, profiles
from kperf.core.lifecycle import dispatch
from kperf.core.lifecycle.task_names import Task
from kperf.core.mail import bodies, recipients, replies
from kperf.core.models import (
    Alert,
    ChangePoint,
    Comparison,
    MachineClass,
    MetricComparison,
    PatchSeries,
    RecipientAddress,
    Submission,
)
from kperf.core.results import outcome, sweeps

log = logging.getLogger(__name__)

WRAP = 80
TABLE_MAX_LINES = 40  # longer (or wider) mmtests-style tables stay on the page


def _queue(kind: str, key: str, to: list[str], subject: str, body: str, owner: User | None = None) -> Alert:
    """The alert of `key`, written now if it is new; `owner` is whose limits it counts against (recipients)."""
    alert, created = Alert.objects.get_or_create(
        key=key,
        defaults={
            "kind": kind,
            "owner": owner,
            "recipients": to,
            "subject": subject[:300],
            "body": body,
            "status": Alert.Status.PENDING if to else Alert.Status.NO_RECIPIENT,
            "last_error": "" if to else "nobody to tell: the user has no e-mail address",
        },
    )
    if created and to:
        dispatch.after_commit(Task.SEND_ALERTS)
    return alert


def _fill(text: str) -> str:
    """A paragraph wrapped at the mail's width; a path, an address or a sha longer than a line stays whole."""
    return textwrap.fill(text, WRAP, break_on_hyphens=False, break_long_words=False)


def _fmt_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.2f}%"


# Said in every mail, because numbers of two clocks are not comparable.
CLOCK_WORDS = {
    "instructions": "instruction clock (per 10^9 guest instructions)",
    "wall": "wall clock",
}


def _metric_line(m: MetricComparison, bench: str, mclass: str, clock: str) -> str:
    ci = f"[{_fmt_pct(m.ci_low_pct)}, {_fmt_pct(m.ci_high_pct)}]"
    q = "n/a" if m.q_value is None else f"{m.q_value:.2g}"
    first = f"{m.metric} ({bench}, {mclass}): {_fmt_pct(m.change_pct)} {ci} q={q}"
    second = (
        f"{clock} clock, boots {m.base_boots}/{m.head_boots}, "
        f"iterations {m.base_samples}/{m.head_samples}, threshold {m.min_effect_pct:g}%"
    )
    wrap = textwrap.TextWrapper(WRAP, break_on_hyphens=False, break_long_words=False)
    wrap.initial_indent, wrap.subsequent_indent = "  ", "      "
    head = wrap.fill(first)
    wrap.initial_indent = "      "
    return f"{head}\n{wrap.fill(second)}"


def _bench(comp: Comparison, several_grids: bool) -> str:
    return outcome.benchmark_label(comp.benchmark, comp.grid, several_grids)


def _unflagged_counts(metrics: list[MetricComparison], several_grids: bool) -> list[str]:
    """Per benchmark and class, how many metrics each unflagged verdict has: "  pagealloc on mm: 90 inconclusive"."""
    counts: dict[tuple[str, str], Counter[str]] = {}
    for m in metrics:
        if m.verdict not in sweeps.FLAGGED:
            key = (_bench(m.comparison, several_grids), m.comparison.machine_class.name)
            counts.setdefault(key, Counter())[m.verdict] += 1
    words: dict[str, str] = {MetricComparison.Verdict.ERROR: "not judged (kperf failed on them)"}
    out = []
    for (bench, mclass), n in sorted(counts.items()):
        said = ", ".join(f"{k} {words.get(v, v)}" for v, k in n.most_common())
        out.append(_fill_indented(f"{bench} on {mclass}: {said}"))
    return out


def _fill_indented(text: str) -> str:
    return textwrap.fill(text, WRAP, initial_indent="  ", subsequent_indent="    ", break_long_words=False)


def _shape(sub: Submission, mclass: MachineClass) -> str:
    """What was measured on a class: "mm profile, 2 vCPUs, 2 NUMA nodes" (the
    profile is the class's unless the submission chose one; 0 vCPUs is the
    runner's default, 0 nodes none declared)."""
    vcpus, nodes = mclass.vcpus, mclass.numa_nodes
    cpus = f", {vcpus} vCPU{'s' if vcpus != 1 else ''}" if vcpus else ""
    numa = f", {nodes} NUMA nodes" if nodes else ""
    return f"{profiles.class_profile(mclass, sub.profile)} profile{cpus}{numa}"


def _sweep_sections(metrics: list[MetricComparison], several_grids: bool) -> list[str]:
    """Each comparison's sweeps, one block per benchmark (and grid) and class, its points in order (results.sweeps)."""
    per_comparison: dict[tuple[str, str], list[MetricComparison]] = {}
    for m in metrics:
        key = (_bench(m.comparison, several_grids), m.comparison.machine_class.name)
        per_comparison.setdefault(key, []).append(m)
    out = []
    for (bench, mclass), rows in sorted(per_comparison.items()):
        # Only the sweeps with a flagged point: the others are counted above and drawn on the page.
        found = [
            s
            for s in sweeps.sweeps((m.metric, m.change_pct, m.verdict) for m in rows)
            if any(p["verdict"] in sweeps.FLAGGED for p in s["points"])
        ]
        if found:
            lines = [f"{bench} on {mclass}, change by point (* flagged):"]
            for sweep in found:
                lines += sweeps.mail_lines(sweep)
            out.append("\n".join(lines))
    return out


def submission_mail(sub: Submission) -> tuple[str, str]:
    """(subject, body) of the mail that answers a finished submission."""
    title = f"[kperf] #{sub.pk} {sub.head_ref} vs {sub.base_ref}"
    link = f"{settings.KPERF_BASE_URL}/submissions/{sub.pk}"
    head = f"{sub.head_ref} ({sub.head_sha[:12] or 'unresolved'})"
    base = f"{sub.base_ref} ({sub.base_sha[:12] or 'unresolved'})"
    several = len(sub.grids) > 1
    benches = f"{', '.join(sub.benchmarks)} ({', '.join(sub.grids)} grid{'s' if several else ''})"
    built = sorted(set(sub.submission_builds.values_list("build__profile", flat=True)))
    kernels = (
        f"\nKernels built with the {' and '.join(built)} configuration profile{'s' if len(built) > 1 else ''}."
        if built
        else ""
    )
    intro = f"kperf compared {head}\nagainst {base}\nof {sub.tree.url}\non {benches}.{kernels}"
    # The same words as the top of the page (kperf.core.results.outcome).
    subject = f"{title}: {outcome.verdict_line(sub)}"
    if sub.status == Submission.Status.FAILED:
        # Wrapped like the rest of the mail; a path or a log line longer than a line stays whole,
        # and so does an indented line (a command to run, as a runner's refusal of an old QEMU gives).
        lines = f"It failed: {sub.error}".splitlines()
        why = "\n".join(_fill(line) if line.strip() and not line.startswith("  ") else line for line in lines)
        return subject, f"{intro}\n\n{why}\n\nDetails: {link}\n"
    metrics = sorted(
        MetricComparison.objects.filter(comparison__submission=sub).select_related("comparison__machine_class"),
        key=lambda m: (m.comparison.benchmark, m.comparison.grid, sweeps.metric_order(m.metric)),
    )
    # The finding first (issue 41): the verdict, each flagged metric with its
    # change and interval, then per benchmark how many were not flagged; the
    # page names those.
    sections = [f"Verdict: {outcome.verdict_line(sub)}"]
    warnings = _config_warnings(sub)
    if warnings:
        # It qualifies every number below, so it is said before them; the options are listed further down.
        sections.append(_fill("Warning: base and head were built with different configurations (listed below)."))
    for verdict, heading in (
        (MetricComparison.Verdict.REGRESSION, "Regressions (negative is worse):"),
        (MetricComparison.Verdict.IMPROVEMENT, "Improvements:"),
    ):
        chosen = [m for m in metrics if m.verdict == verdict]
        if chosen:
            rows = [
                _metric_line(m, _bench(m.comparison, several), m.comparison.machine_class.name, m.comparison.clock)
                for m in chosen
            ]
            sections.append("\n".join([heading, *rows]))
    rest = _unflagged_counts(metrics, several)
    if rest:
        sections.append("\n".join(["Not flagged (the page names them):", *rest]))
    sections += [intro, *warnings]
    sections += _sweep_sections(metrics, several)
    # Each time boots were added, as the page says it (wrapped: the
    # sentences name metrics and run long).
    notes = [_fill(note) for note in outcome.rerun_notes(sub)]
    if notes:
        sections.append("\n".join(notes))
    comparisons = list(
        sub.comparisons.select_related("machine_class").order_by("benchmark", "grid", "machine_class__name")
    )
    alone = _boots_alone(comparisons)
    if alone:
        sections.append(alone)
    for comp in comparisons:
        table = comp.table.rstrip()
        if not table:
            continue
        lines = table.splitlines()
        # Two lines: the class's name and shape, then the clock (80 columns).
        shape = _shape(sub, comp.machine_class)
        clock = CLOCK_WORDS.get(comp.clock, comp.clock)
        where = f"{_bench(comp, several)} on {comp.machine_class.name} ({shape}),\n{clock}"
        if len(lines) <= TABLE_MAX_LINES and max(len(line) for line in lines) <= WRAP:
            sections.append(f"{where}:\n\n{table}")
        else:
            # The page allocator's table has hundreds of rows, and a wide
            # table cannot be wrapped: the verdicts above are the news.
            sections.append(f"{where}:\nthe table ({len(lines)} lines) is on the page.")
    sections.append(f"Details: {link}\n")
    return subject, "\n\n".join(sections)


def _boots_alone(comparisons: list[Comparison]) -> str:
    """The paragraph naming the comparisons whose intervals rest on their boots alone (as the page's
    method line says it): the lab has not yet measured the boot spread of their shape."""
    alone = [
        f"{c.benchmark} on {c.machine_class.name}, {c.boots_alone} metric{'s' if c.boots_alone != 1 else ''}"
        for c in comparisons
        if c.boots_alone
    ]
    if not alone:
        return ""
    return _fill(
        f"Interval from boots alone for {'; '.join(alone)}: no boot spread measured yet for this profile, vCPUs, "
        "NUMA nodes and grid, so two boots a side that happen to agree read as exact. kperf measures it from the "
        'base boots of submissions of this shape (docs/statistics.md, "Each shape\'s own boot spread").'
    )


# Options listed in the mail; the page lists every one.
CONFIG_OPTIONS_MAILED = 20


def _short(value: str) -> str:
    # A string option (a command line, a path) can run long; the page has it whole.
    return value if len(value) <= 16 else value[:13] + "..."


def _config_warnings(sub: Submission) -> list[str]:
    """A paragraph per arch whose base and head .config differ (kperf.core.builds.configs): it qualifies
    every verdict below it."""
    out = []
    for arch, diffs in configs.submission_differences(sub).items():
        if not diffs:
            continue
        head = (
            f"Warning: the base and head kernels for {arch} were built with different configurations "
            f"({len(diffs)} option{'s' if len(diffs) != 1 else ''} of the final .config differ), so the numbers "
            "below measure the configuration as well as the code change:"
        )
        width = max(len(d["option"]) for d in diffs[:CONFIG_OPTIONS_MAILED])
        rows = [
            f"  {d['option']:<{width}}  base {_short(d['base'])}, head {_short(d['head'])}"
            for d in diffs[:CONFIG_OPTIONS_MAILED]
        ]
        if len(diffs) > CONFIG_OPTIONS_MAILED:
            rows.append(f"  ... and {len(diffs) - CONFIG_OPTIONS_MAILED} more, listed on the page.")
        out.append("\n".join([_fill(head), *rows]))
    return out


def submission_finished(sub: Submission) -> Alert:
    """Queue the answer to a submission that just finished (caller's transaction)."""
    subject, body = submission_mail(sub)
    email = sub.owner.email
    # The owner, and whoever they asked for (a list a patch series was posted to), if kperf may mail them.
    mail_to, refused = recipients.permitted(sub.owner, list(sub.mail_to))
    if refused:
        # Named before addresses had to be confirmed, or no longer confirmed: the owner hears why.
        body += "\n" + _not_mailed(refused, 'not confirmed (docs/submitting.md, "Who gets the result mail")')
        log.warning("submission %s: not mailed to %s: not confirmed", sub.pk, ", ".join(refused))
    to = list(dict.fromkeys(([email] if email else []) + mail_to))
    alert = _queue(Alert.Kind.SUBMISSION, f"submission:{sub.pk}", to, subject, body, owner=sub.owner)
    # A patch series' answer goes into its thread (kperf.core.builds.patch_series).
    thread = PatchSeries.objects.filter(submission=sub).values_list("message_id", flat=True).first()
    if thread and not alert.in_reply_to and alert.status == Alert.Status.PENDING:
        Alert.objects.filter(pk=alert.pk).update(in_reply_to=thread)
        alert.in_reply_to = thread
    return alert


def _not_mailed(addresses: list[str], why: str) -> str:
    """The paragraph that tells the owner whom kperf left out, and why."""
    return _fill(f"kperf did not mail this to {', '.join(addresses)}: {why}.")


def address_confirmation(user: User, row: RecipientAddress, token: str) -> Alert:
    """Queue the mail asking `row.address` to agree to get the user's results (kperf.core.mail.confirmations)."""
    name = user.get_username()
    email = recipients.own_address(user)
    link = f"{settings.KPERF_BASE_URL}/addresses/confirm/{token}"
    subject = f"[kperf] may {name} send kernel test results to this address?"
    body = bodies.render(
        "address_confirmation",
        name=name,
        email=email,
        base_url=settings.KPERF_BASE_URL,
        address=row.address,
        days=settings.KPERF_MAIL_CONFIRM_DAYS,
        link=link,
    )
    key = f"confirm:{row.pk}:{row.token_hash[:16]}"
    return _queue(Alert.Kind.CONFIRM, key, [row.address], subject, body, owner=user)


def change_point_mail(cp: ChangePoint) -> tuple[str, str]:
    branch = cp.branch
    commit = cp.commit
    subject = f"[kperf] {branch.branch}: {cp.metric} {cp.change_pct:+.2f}% at {commit.sha[:12]}"
    if cp.previous is None:
        where = f"{commit.sha[:12]} (the first measured commit)"
    elif cp.untested_between:
        where = (
            f"between {cp.previous.sha[:12]} and {commit.sha[:12]}: {cp.untested_between} commits\n"
            f"                 there could not be measured; bisect {cp.previous.sha[:12]}..{commit.sha[:12]}"
        )
    else:
        where = f"{commit.sha[:12]}, right after {cp.previous.sha[:12]}"
    # The commit's subject cut where the line would pass 80 columns ("  first commit   " and a sha take 30).
    body = bodies.render(
        "change_point",
        cp=cp,
        branch=branch,
        clock=CLOCK_WORDS.get(cp.clock, cp.clock),
        change=f"{cp.change_pct:+.2f}%",
        p=f"{cp.p_value:.2g}",
        commit=commit.sha[:12],
        subject=commit.subject[: WRAP - 30],
        where=where,
        seen=cp.detected_at.sha[:12],
        base_url=settings.KPERF_BASE_URL,
    )
    return subject, body


def change_point_found(cp: ChangePoint) -> Alert | None:
    """Queue the mail for a newly found change point; regressions only."""
    if cp.direction != "regression":
        return None
    branch = cp.branch
    # Its watchers once they confirmed (the lab's reference series: all of them); the owner hears who not.
    watchers, waiting = recipients.branch_watchers(branch)
    to = list(dict.fromkeys(([branch.owner.email] if branch.owner.email else []) + watchers))
    subject, body = change_point_mail(cp)
    if waiting:
        why = "they have not confirmed that they want kperf's mail; each was sent a link when the branch was tracked"
        body += "\n" + _not_mailed(waiting, why) + "\n"
    key = f"change-point:{branch.pk}:{cp.machine_class_id}:{cp.metric}:{cp.commit.sha}"
    # Anyone's but the lab's count against the owner's daily limit of addresses besides theirs.
    owner = None if recipients.vouched_by_operator(branch) else branch.owner
    return _queue(Alert.Kind.CHANGE_POINT, key, to, subject, body, owner=owner)


def send_pending(limit: int = 50) -> int:
    """Send waiting alerts; returns how many went out."""
    if not settings.EMAIL_HOST:
        Alert.objects.filter(status=Alert.Status.PENDING).exclude(last_error__startswith="no SMTP").update(
            last_error="no SMTP host configured (KPERF_SMTP_HOST): the alert waits"
        )
        return 0
    sent = 0
    with transaction.atomic():
        batch = list(
            Alert.objects.select_for_update(skip_locked=True)
            .filter(status=Alert.Status.PENDING)
            .order_by("created")[:limit]
        )
        if not batch:
            return 0
        # The owners' recipient limits are counted under their locks, held to the commit (recipients).
        recipients.lock(a.owner_id for a in batch if a.owner_id is not None)
        try:
            connection = get_connection(fail_silently=False)
            connection.open()
        except OSError as e:
            for alert in batch:
                _failed_attempt(alert, f"cannot reach {settings.EMAIL_HOST}:{settings.EMAIL_PORT}: {e}")
            return 0
        try:
            for alert in batch:
                if not _within_limit(alert):
                    continue
                msg = EmailMessage(
                    alert.subject,
                    alert.body,
                    settings.DEFAULT_FROM_EMAIL,
                    alert.recipients,
                    connection=connection,
                    # RFC 3834: no auto-replies to a machine's mail.
                    headers={
                        "Auto-Submitted": "auto-generated",
                        "X-Kperf-Alert": alert.kind,
                        **_thread_headers(alert),
                        # Reply-To with the alert's reply token; an answer's own headers (docs/triage.md).
                        **replies.headers(alert),
                    },
                )
                try:
                    msg.send()
                except Exception as e:  # smtplib raises many kinds; each is one failed attempt
                    _failed_attempt(alert, f"{type(e).__name__}: {e}")
                    continue
                alert.status = Alert.Status.SENT
                alert.sent = timezone.now()
                alert.attempts += 1
                alert.last_error = ""
                alert.save(update_fields=["status", "sent", "attempts", "last_error"])
                sent += 1
        finally:
            connection.close()
    if sent:
        log.info("sent %d alerts", sent)
    return sent


def _within_limit(alert: Alert) -> bool:
    """Leave out recipients over the owner's daily limit, saying so in the mail; False if none is left."""
    dropped = recipients.within_limit(alert)
    if not dropped:
        return True
    limit = settings.KPERF_MAIL_EXTRA_RECIPIENTS_PER_DAY
    why = f"kperf mails at most {limit} addresses a day besides yours (KPERF_MAIL_EXTRA_RECIPIENTS_PER_DAY)"
    alert.body += "\n" + _not_mailed(dropped, why) + "\n"
    log.warning("alert %s: not mailed to %s: over the owner's daily limit of %d", alert.pk, ", ".join(dropped), limit)
    fields = ["recipients", "body"]
    if not alert.recipients:
        alert.status, alert.last_error = Alert.Status.NO_RECIPIENT, f"nobody left to tell: {why}"
        fields += ["status", "last_error"]
    alert.save(update_fields=fields)
    return bool(alert.recipients)


def _thread_headers(alert: Alert) -> dict[str, str]:
    if not alert.in_reply_to:
        return {}
    mid = f"<{alert.in_reply_to}>"
    return {"In-Reply-To": mid, "References": mid}


def _failed_attempt(alert: Alert, error: str) -> None:
    alert.attempts += 1
    alert.last_error = error[:2000]
    if alert.attempts >= settings.KPERF_ALERT_MAX_ATTEMPTS:
        alert.status = Alert.Status.FAILED
    alert.save(update_fields=["attempts", "last_error", "status"])
    log.warning("alert %s: attempt %d failed: %s", alert.pk, alert.attempts, error)
