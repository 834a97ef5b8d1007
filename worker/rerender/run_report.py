"""The drift report: a JSON document (`--report`) and the summary printed at the end."""

from collections import Counter
from typing import Any, TextIO

from worker.rerender.drift import CHANGED, ERROR, SAME
from worker.rerender.records import Tally

UNKNOWN_KIND = "(unknown)"


def by_kind(tally: Tally) -> dict[str, dict[str, int]]:
    """Records, status and drift counts per kind."""
    kinds: dict[str, Counter[str]] = {}
    for (kind, status, _, drift), n in tally.outcomes.items():
        row = kinds.setdefault(kind or UNKNOWN_KIND, Counter())
        row["records"] += n
        row[status] += n
        if drift:
            row["drift_" + drift] += n
    columns = ("records", "ok", "error", "drift_same", "drift_changed", "drift_error")
    return {kind: {c: row[c] for c in columns} for kind, row in sorted(kinds.items())}


def errors_by_code(tally: Tally) -> dict[str, int]:
    errors: Counter[str] = Counter()
    for (_, status, code, _), n in tally.outcomes.items():
        if status == "error":
            errors[code] += n
    return dict(sorted(errors.items()))


def totals(tally: Tally) -> dict[str, Any]:
    """Record, status and drift counts over a whole output file."""
    drift = {SAME: tally.drift(SAME), CHANGED: tally.drift(CHANGED), ERROR: tally.drift(ERROR)}
    return {
        "records": tally.records,
        "ok": tally.records - tally.errors,
        "error": tally.errors,
        "bad_lines": tally.bad_lines,
        "blank_lines": tally.blank_lines,
        "with_prior_messages": sum(drift.values()),
        "drift": drift,
        # The share of the ok replies' prompt tokens before their last cache breakpoint
        # (meta.cache): what a provider's prompt cache can reuse on each session's next
        # render. By each reply's own tokenizer: the budget's, else the estimate.
        "cacheable": cacheable(tally.stable_tokens, tally.prompt_tokens),
    }


def cacheable(stable_tokens: int, prompt_tokens: int) -> dict[str, Any]:
    """The cacheable share of prompts: tokens before the last breakpoint of all."""
    return {
        "stable_tokens": stable_tokens,
        "prompt_tokens": prompt_tokens,
        "share": round(stable_tokens / prompt_tokens, 3) if prompt_tokens else None,
    }


def build_report(
    *,
    tally: Tally,
    run_tally: Tally,
    input_path: str,
    output_path: str,
    engine: dict[str, Any],
    interrupted: bool,
    resumed_after_line: int,
    elapsed_s: float,
    renderer_template_versions: dict[str, str] | None,
    diff_dir: str,
    diffs_written: int,
    diff_limit: int | None,
    archive: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Totals over the whole output file (resumed part included); rates for this run."""
    run_jobs = run_tally.records
    return {
        "status": "interrupted" if interrupted else "complete",
        "input": input_path,
        "output": output_path,
        **engine,
        "resumed_after_line": resumed_after_line,
        "elapsed_s": round(elapsed_s, 3),
        "this_run": {
            "records": run_jobs,
            "jobs_per_s": round(run_jobs / elapsed_s, 1) if elapsed_s > 0 else None,
            "mean_render_ms": round(run_tally.render_ms / run_tally.timed, 3)
            if run_tally.timed
            else None,
        },
        "totals": totals(tally),
        "errors_by_code": errors_by_code(tally),
        "by_kind": by_kind(tally),
        "template_versions": [
            {"family": family, "template_version": version, "records": n}
            for (family, version), n in sorted(tally.versions.items())
        ],
        "renderer_template_versions": renderer_template_versions,
        "diffs": {
            "dir": diff_dir,
            "written": diffs_written,
            "limit": diff_limit,
        },
        "bad_lines": [{"line": line, "reason": reason} for line, reason in tally.bad_samples],
        **({"archive": archive} if archive is not None else {}),
    }


def print_summary(report: dict[str, Any], stream: TextIO) -> None:
    counts = report["totals"]
    drift = counts["drift"]
    run = report["this_run"]
    rate = f", {run['jobs_per_s']:,.0f} jobs/s" if run["jobs_per_s"] else ""
    lines = [
        f"rerender {report['status']}: {counts['records']:,} records in {report['output']}"
        f" ({run['records']:,} this run in {report['elapsed_s']:.1f} s{rate})",
    ]
    if report["resumed_after_line"]:
        lines.append(f"  resumed after input line {report['resumed_after_line']:,}")
    errors = ", ".join(f"{code} {n:,}" for code, n in report["errors_by_code"].items())
    lines.append(
        f"  ok {counts['ok']:,}, error {counts['error']:,}"
        + (f" ({errors})" if errors else "")
        + f", bad input lines {counts['bad_lines']:,}"
    )
    if counts["with_prior_messages"]:
        lines.append(
            f"  drift: same {drift[SAME]:,}, changed {drift[CHANGED]:,}, error {drift[ERROR]:,}"
            f" (of {counts['with_prior_messages']:,} lines with prior messages)"
        )
        for kind, row in report["by_kind"].items():
            if row["drift_same"] + row["drift_changed"] + row["drift_error"]:
                lines.append(
                    f"    {kind}: same {row['drift_same']:,}, changed {row['drift_changed']:,},"
                    f" error {row['drift_error']:,}"
                )
    cacheable = counts["cacheable"]
    if cacheable["share"] is not None:
        lines.append(
            f"  cacheable prefix: {cacheable['share']:.1%} of {cacheable['prompt_tokens']:,}"
            " prompt tokens (meta.cache)"
        )
    for item in report["template_versions"]:
        lines.append(f"  template {item['template_version']}: {item['records']:,} records")
    diffs = report["diffs"]
    if diffs["written"]:
        lines.append(f"  diffs: {diffs['written']:,} written to {diffs['dir']}")
    elif drift[CHANGED]:
        lines.append("  diffs: none written (--diff-limit 0)")
    if "archive" in report:
        lines.extend(_archive_summary(report["archive"]))
    for sample in report["bad_lines"][:5]:
        lines.append(f"  bad input line {sample['line']}: {sample['reason']}")
    stream.write("\n".join(lines) + "\n")
    stream.flush()


def _archive_summary(archive: dict[str, Any]) -> list[str]:
    """The read of `rerender --from-archive`: records, unreadable ones, duplicates."""
    lines = [
        f"  archive {archive['stream']} at {archive['broker']}: {archive['records']:,} records"
        f" to offset {archive['end_offset']}, {archive['bad']:,} unreadable"
        + (f", {archive['no_job']:,} without a job" if archive["no_job"] else "")
    ]
    duplicates = archive["duplicates"]
    if duplicates:
        lines.append(
            f"  duplicate records: {len(duplicates):,} (a job recorded again, e.g. after a"
            " worker died before acknowledging it)"
        )
        for item in duplicates[:5]:
            lines.append(
                f"    line {item['line']:,} (offset {item['offset']}): job {item['job_id']}"
                f" again, first on line {item['first_line']:,}"
            )
    return lines
