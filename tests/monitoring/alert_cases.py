"""`promtool test rules` cases for every alert of observability/alerts.py, on series shaped as the agents serve
them and the community chart's `kubernetes-pods` job labels them (tests/fixtures/prometheus/kubernetes-pods-job.yaml:
the pod's labels, `namespace`, `pod`, `node`). Each alert has a case where it fires and one where it must not.

The expected annotations are the rule's own templates with the labels and the value filled in as Prometheus
renders them, so promtool checks the templates too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# One agent pod as the kubernetes-pods job labels its series (honor_labels; the pod's labels mapped).
AGENT = {
    "job": "kubernetes-pods",
    "namespace": "warmstart-system",
    "pod": "warmstart-agent-7x2kq",
    "node": "ip-10-20-1-17.ec2.internal",
    "app_kubernetes_io_name": "warmstart-agent",
}
COPY_ALERT = "WarmstartNodeCopyMissing"  # one rule per model, each with the model's bound


@dataclass(frozen=True)
class Expected:
    labels: dict[str, str]
    value: str = ""  # the value as `humanize` or `humanizeDuration` renders it


@dataclass(frozen=True)
class Case:
    name: str
    alert: str
    series: dict[str, str]  # promtool series -> its values (one a minute)
    eval_minutes: int
    expected: list[Expected] = field(default_factory=list)  # empty: the alert must not fire


def series(name: str, **labels: str) -> str:
    merged = {**AGENT, **labels}
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in merged.items()) + "}"


def cases(model: str, bound_seconds: int | None, pruner_late_seconds: int | None = None) -> list[Case]:
    """The cases of every alert; those of the copy alert only where the model's weights are cached (a bound), and
    those of the pruner's lateness only where its schedule is a rate (promtool's clock starts at epoch 0: a report
    of epoch 0 is as old as the evaluation time)."""
    starts = "warmstart_pod_start_seconds_count"
    cold = series(starts, model=model, case="cold", node_kind="new")
    warm = series(starts, model=model, case="warm", node_kind="existing")
    use = "warmstart_compile_cache_use_total"
    every = [
        Case("three cold of four starts", "WarmstartStartsFallingBackToCold",
             {cold: "0 1 2 3x40", warm: "0 0 0 1x40"}, 30, [Expected({"model": model}, "3")]),
        Case("one cold start (a new configuration's first), the rest warm", "WarmstartStartsFallingBackToCold",
             {cold: "0 1x40", warm: "0 0 1 2 3 4 5x40"}, 30),
        Case("two cold of five starts", "WarmstartStartsFallingBackToCold",
             {cold: "0 1 2x40", warm: "0 1 2 3x40"}, 30),
        Case("a loop stalled, then the agent restarted", "WarmstartAgentLoopStalled",
             {series("warmstart_agent_loop_stalled", loop="tick"): "0 0 0 1 1"}, 10,
             [Expected({k: AGENT[k] for k in ("namespace", "pod", "node")} | {"loop": "tick"})]),
        Case("a stall past the hold", "WarmstartAgentLoopStalled",
             {series("warmstart_agent_loop_stalled", loop="tick"): "0 0 0 1 1"}, 25),
        Case("a load failure in the last half hour", "WarmstartCompileCacheLoadFailures",
             {series(use, model=model, outcome="miss", cause="load-failure"): "0 0 1x40"}, 10,
             [Expected({"model": model})]),
        Case("a load failure long ago", "WarmstartCompileCacheLoadFailures",
             {series(use, model=model, outcome="miss", cause="load-failure"): "0 0 1x60"}, 45),
        Case("a failed restore", "WarmstartCompileCacheRestoresFailing",
             {series("warmstart_compile_cache_restores_total", model=model, outcome="failed"): "0 0 1x40"}, 10,
             [Expected({"model": model})]),
        Case("restores that succeed", "WarmstartCompileCacheRestoresFailing",
             {series("warmstart_compile_cache_restores_total", model=model, outcome="restored"): "0 1 2 3x40"}, 10),
        Case("three failed publishes in the hour", "WarmstartCompileCachePublishFailing",
             {series("warmstart_compile_cache_publishes_total", model=model, outcome="failed"): "0 0 1x9 2x9 3x20"},
             30, [Expected({"model": model})]),
        Case("two failed publishes", "WarmstartCompileCachePublishFailing",
             {series("warmstart_compile_cache_publishes_total", model=model, outcome="failed"): "0 0 1x9 2x20"}, 15),
        Case("the pruner's last run failed, as every agent reads it", "WarmstartPrunerFailing",
             {series("warmstart_pruner_last_run_ok"): "1 1 0x20",
              series("warmstart_pruner_last_run_ok", pod="warmstart-agent-9zq4m", node="ip-10-20-2-9.ec2.internal"):
              "1 1 0x20"}, 10, [Expected({})]),
        Case("the pruner's last run pruned", "WarmstartPrunerFailing",
             {series("warmstart_pruner_last_run_ok"): "1x20"}, 10),
    ]  # fmt: skip
    if pruner_late_seconds is not None:
        late_minutes = pruner_late_seconds // 60 + 60
        every += [
            Case("no pruner run for two periods and more", "WarmstartPrunerNotRunning",
                 {series("warmstart_pruner_last_run_timestamp_seconds"): f"0x{late_minutes}"}, late_minutes,
                 [Expected({}, duration(late_minutes * 60))]),
            Case("a pruner run within two periods", "WarmstartPrunerNotRunning",
                 {series("warmstart_pruner_last_run_timestamp_seconds"): f"0x{late_minutes}"},
                 pruner_late_seconds // 60 - 60),
        ]  # fmt: skip
    if bound_seconds is None:
        return every
    minutes_past = bound_seconds // 60 + 4
    return every + [
        Case("a node without its copy past the bound", COPY_ALERT,
             {series("warmstart_node_copy_missing_seconds", model=model): f"0+60x{minutes_past + 5}",
              series("warmstart_node_copy_missing_seconds", model="another-model"): "0+600x30"},
             minutes_past,
             [Expected({k: AGENT[k] for k in ("namespace", "pod", "node")} | {"model": model},
                       duration(minutes_past * 60))]),
        Case("a node still within the bound", COPY_ALERT,
             {series("warmstart_node_copy_missing_seconds", model=model): "0+60x40"}, bound_seconds // 60),
    ]  # fmt: skip


def duration(seconds: int) -> str:
    """Prometheus' humanizeDuration of whole seconds (template/template.go): "20m 0s", "1h 4m 0s"."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h {minutes}m {secs}s"
    if hours:
        return f"{hours}h {minutes}m {secs}s"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def filled(template: str, labels: dict[str, str], value: str) -> str:
    """The annotation as Prometheus renders it, for the few template forms the rules use."""
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)
    return re.sub(r"\{\{ \$value \| humanize(Duration)? \}\}", lambda _: value, text)


def promtool_tests(
    rules_file: str, rules: list[dict], model: str, bound_seconds: int | None, pruner_late_seconds: int | None
) -> dict:
    """The promtool test file: one test per case (each its own series), every alert's case where it fires and
    one where it must not."""
    by_name = {
        rule["alert"]: rule for rule in rules if rule["alert"] != COPY_ALERT or f'model="{model}"' in rule["expr"]
    }
    tests = []
    for case in cases(model, bound_seconds, pruner_late_seconds):
        rule = by_name[case.alert]
        tests.append(
            {
                "name": case.name,
                "interval": "1m",
                "input_series": [{"series": name, "values": values} for name, values in case.series.items()],
                "alert_rule_test": [
                    {
                        "eval_time": f"{case.eval_minutes}m",
                        "alertname": case.alert,
                        "exp_alerts": [
                            {
                                "exp_labels": {**expected.labels, **rule["labels"]},
                                "exp_annotations": {
                                    key: filled(text, expected.labels, expected.value)
                                    for key, text in rule["annotations"].items()
                                },
                            }
                            for expected in case.expected
                        ],
                    }
                ],
            }
        )
    return {"rule_files": [rules_file], "evaluation_interval": "1m", "tests": tests}
