"""`python -m odradek.faults.report build/faults/*.json`: the fault runs' JSON reports as the
Markdown table of docs/reliability.md (one column a seed: faults by kind, writes, anomalies; for
the ordered workload also the topic's changes and the group's deliveries; for the transactional
one the transactions' outcomes and the readers' deliveries; for the groups one each group's
deliveries, commits and rebalances; for the admin one each kind of operation by its outcome)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def table(reports: list[dict[str, Any]]) -> str:
    reports = sorted(reports, key=lambda r: r["seed"])
    kinds = sorted({k for r in reports for k in r["faults"]})
    # every run's rows, in the order the newest run gives them (an older run may lack a newer row)
    anomalies = list(dict.fromkeys(k for r in reversed(reports) for k in r["anomalies"]))
    rows = [["seed", *(str(r["seed"]) for r in reports)],
            ["---", *("---:" for _ in reports)],
            ["faults injected", *(str(r["faults_total"]) for r in reports)]]
    rows += [[f"&nbsp;&nbsp;{k}", *(str(r["faults"].get(k, 0)) for r in reports)] for k in kinds]
    rows += [["writes acknowledged", *(f"{r['writes_acknowledged']:,}" for r in reports)]]
    # the default workload's producer profiles, those of every run (a run before profiles has none)
    profiles = list(dict.fromkeys(p for r in reports for p in r.get("writes_acknowledged_by_profile", {})))
    rows += [[f"&nbsp;&nbsp;by {profile}",
              *(f"{r.get('writes_acknowledged_by_profile', {}).get(profile, 0):,}" for r in reports)]
             for profile in profiles]
    if reports and all(r.get("workload") == "ordered" for r in reports):
        # the ordered workload's own counts: what the topic went through, what the group delivered
        changes = list(reports[0]["topic_changes"])
        rows += [[name.replace("_", " ") if name.startswith("member_") else f"topic: {name.replace('_', ' ')}",
                  *(str(r["topic_changes"][name]) for r in reports)] for name in changes]
        rows += [["deliveries to the group", *(f"{r['deliveries']:,}" for r in reports)],
                 ["&nbsp;&nbsp;redeliveries (not anomalies)", *(f"{r['redeliveries']:,}" for r in reports)],
                 ["member poll errors (not anomalies)", *(str(r["member_poll_errors"]) for r in reports)]]
    if reports and all(r.get("workload") == "transactions" for r in reports):
        # the transactional workload's own counts: the transactions' outcomes as their clients saw
        # them, what the readers were delivered, and the errors the producers handled
        rows += [[f"transactions {name.replace('_', ' ')}" if name != "transactions" else "transactions",
                  *(f"{r['transactions'][name]:,}" for r in reports)] for name in reports[0]["transactions"]]
        rows += [[name.replace("_", " "), *(f"{r['records'][name]:,}" for r in reports)]
                 for name in reports[0]["records"]]
        rows += [["abortable errors (not anomalies)", *(str(r["abortable_errors"]) for r in reports)],
                 ["retriable errors (not anomalies)", *(str(sum(r["retriable_errors"].values())) for r in reports)]]
    if reports and all(r.get("workload") == "groups" for r in reports):
        # the groups workload's own counts, a group at a time: what it was handed and committed,
        # how often it rebalanced and how long its partitions stood still, how soon it settled
        rows += [[f"kills of {name}", *(str(r["kills"].get(name, 0)) for r in reports)]
                 for name in ("members", "coordinators")]
        for group in reports[0]["groups"]:
            seen = [r["groups"][group] for r in reports]
            rows += [[f"{group}: deliveries (redeliveries)",
                      *(f"{g['deliveries']:,} ({g['redeliveries']:,})" for g in seen)],
                     ["&nbsp;&nbsp;commits (failed in a rebalance)",
                      *(f"{g['commits']:,} ({g['commit_failures']})" for g in seen)],
                     ["&nbsp;&nbsp;retriable errors raised to the application (not anomalies)",
                      *(str(g.get("retriable_errors", 0)) for g in seen)],
                     ["&nbsp;&nbsp;assignments; revoked to assigned, p50 / max (s)",
                      *(f"{g['assignments']}; {g['revoked_to_assigned_p50_s']} / {g['revoked_to_assigned_max_s']}"
                        for g in seen)],
                     ["&nbsp;&nbsp;Stable with lag 0 after (s)", *(str(g["settled_s"]) for g in seen)]]
    if reports and all(r.get("workload") == "admin" for r in reports):
        # the admin workload's own counts: each kind of operation completed (also once the
        # faults were over), refused with a clear error, or neither; the controller kills in
        # their middle, the refusals retried, the scratch topics' re-creations
        for kind in sorted({k for r in reports for k in r["operations"]}):
            outcomes = [r["operations"].get(kind, {}) for r in reports]
            rows += [[f"{kind}: completed / refused / other",
                      *(f"{_completed(o)} / {o.get('refused', 0)} / {sum(o.values()) - _completed(o) - o.get('refused', 0)}"
                        for o in outcomes)]]
        rows += [["controller kills in operations", *(str(r["controller_kills"]) for r in reports)],
                 ["refusals (not anomalies)", *(str(sum(r["refusals"].values())) for r in reports)],
                 ["scratch topics re-created", *(str(sum(r["scratch"]["incarnations"].values())) for r in reports)]]
    rows += [["duration (s)", *(f"{r['duration_s']:.0f}" for r in reports)],
             ["machine stalls over 5 s (not anomalies)", *(str(len(r.get("machine_stalls", []))) for r in reports)]]
    rows += [[name.replace("_", " "), *(str(r["anomalies"].get(name, "-")) for r in reports)] for name in anomalies]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def _completed(outcomes: dict[str, int]) -> int:
    return sum(n for outcome, n in outcomes.items() if outcome.startswith("completed"))


def main(argv: list[str] | None = None) -> int:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    if not paths:
        print("usage: python -m odradek.faults.report REPORT.json [...]", file=sys.stderr)
        return 2
    print(table([json.loads(p.read_text()) for p in paths]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
