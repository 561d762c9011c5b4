"""Dashboards and alert rules of deploy/ use only metrics gangq exports, and the rules are valid."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import yaml

from gangq.queue import metrics
from gangq.queue.store import database

BASE = Path(__file__).resolve().parents[2] / "deploy" / "base"
PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "components" / "prometheus"
METRIC_NAME = re.compile(r"\b(gangq_[a-z0-9_]+)\b")
EXPECTED_DASHBOARDS = {
    "gangq-queue": "gangq / Queue and waits",
    "gangq-tenants": "gangq / Tenants and quotas",
    "gangq-capacity": "gangq / Capacity and fragmentation",
    "gangq-gangs": "gangq / Gang lifecycle and preemptions",
}
REQUIRED_ALERTS = {
    "GangqQueueStuck",
    "GangqGangStartFailures",
    "GangqLeaderMissing",
    "GangqDatabaseUnreachable",
    "GangqWritesRefused",
}


def dashboards() -> dict[str, dict[str, Any]]:
    loaded = (json.loads(p.read_text()) for p in sorted((BASE / "dashboards").glob("*.json")))
    return {d["uid"]: d for d in loaded}


def dashboard_queries(dashboard: dict[str, Any]) -> Iterator[str]:
    """The PromQL of every Prometheus panel and template variable."""
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            if "expr" in target:
                yield target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield variable["query"]["query"]


def rule_groups() -> list[dict[str, Any]]:
    rule = yaml.safe_load((PROMETHEUS / "prometheusrule.yaml").read_text())
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def alert_queries() -> Iterator[str]:
    for group in rule_groups():
        for rule in group["rules"]:
            yield rule["expr"]


def test_the_four_dashboards_exist_with_unique_panel_ids() -> None:
    found = dashboards()
    assert {uid: d["title"] for uid, d in found.items()} == EXPECTED_DASHBOARDS
    for dashboard in found.values():
        ids = [p["id"] for p in dashboard["panels"]]
        assert len(ids) == len(set(ids)), dashboard["uid"]
        for panel in dashboard["panels"]:
            assert panel["targets"], panel["title"]
            assert all(("expr" in t) != ("rawSql" in t) for t in panel["targets"]), panel["title"]


@pytest.mark.parametrize("uid", sorted(EXPECTED_DASHBOARDS))
def test_dashboard_uses_only_exported_metrics(uid: str) -> None:
    exported = metrics.series_names(metrics.create_metrics())
    queries = list(dashboard_queries(dashboards()[uid]))
    used = {name for query in queries for name in METRIC_NAME.findall(query)}
    assert used, uid
    assert used <= exported, sorted(used - exported)
    assert all(METRIC_NAME.search(q) for q in queries)


def test_alerts_use_only_exported_metrics() -> None:
    exported = metrics.series_names(metrics.create_metrics())
    used = {name for query in alert_queries() for name in METRIC_NAME.findall(query)}
    assert used <= exported, sorted(used - exported)
    assert all(METRIC_NAME.search(q) for q in alert_queries())


def test_every_product_metric_is_shown_on_a_dashboard() -> None:
    shown = {
        name
        for dashboard in dashboards().values()
        for query in dashboard_queries(dashboard)
        for name in METRIC_NAME.findall(query)
    }
    product = {
        "gangq_queue_pending_jobs",
        "gangq_admission_wait_seconds_bucket",
        "gangq_devices",
        "gangq_tenant_devices",
        "gangq_preemptions_total",
        "gangq_scheduling_cycle_seconds_bucket",
        "gangq_release_skew_seconds_bucket",
        "gangq_gang_start_failures_total",
        "gangq_largest_placeable_gang",
    }
    assert product <= shown, sorted(product - shown)


def test_required_alerts_exist_with_severity_and_summary() -> None:
    rules = [rule for group in rule_groups() for rule in group["rules"]]
    assert {rule["alert"] for rule in rules} >= REQUIRED_ALERTS
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]


def test_promtool_accepts_the_alert_rules(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package `prometheus`)")
    rules = tmp_path / "gangq-rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups()}))
    result = subprocess.run(
        [promtool, "check", "rules", str(rules)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    """Dashboard queries as recording rules, with Grafana's variables replaced by plain values."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package `prometheus`)")
    queries = [query for d in dashboards().values() for query in dashboard_queries(d)]
    rules = [
        {"record": f"gangq:dashboard:{index}", "expr": panel_query(query)}
        for index, query in enumerate(q for q in queries if "label_values(" not in q)
    ]
    path = tmp_path / "dashboards.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def panel_query(expr: str) -> str:
    return re.sub(r"\$[a-z_]+", ".*", expr.replace("$__rate_interval", "5m"))


GRAFANA_SQL_MACROS = (
    (re.compile(r"\$__timeFilter\((\w+)\)"), r"\1 BETWEEN now() - interval '1 day' AND now()"),
    (re.compile(r"\$__timeFrom\(\)"), "(now() - interval '1 day')"),
    (re.compile(r"\$__timeTo\(\)"), "now()"),
)


def history_queries() -> list[tuple[str, str]]:
    return [
        (panel["title"], target["rawSql"])
        for dashboard in dashboards().values()
        for panel in dashboard["panels"]
        for target in panel["targets"]
        if "rawSql" in target
    ]


async def test_history_panels_run_on_the_migrated_schema(database_url: str) -> None:
    """The PostgreSQL panels query the real tables; a renamed column fails here, not in Grafana."""
    queries = history_queries()
    assert len(queries) == 3
    connection = await asyncpg.connect(database.libpq_url(database_url))
    try:
        for title, raw in queries:
            sql = raw
            for pattern, replacement in GRAFANA_SQL_MACROS:
                sql = pattern.sub(replacement, sql)
            assert "$" not in sql, title
            await connection.fetch(sql)
    finally:
        await connection.close()


def firing(alert: str, at: str, **labels: str) -> dict[str, Any]:
    severity = {"critical", "warning"}
    assert labels.get("severity") in severity
    return {"eval_time": at, "alertname": alert, "exp_alerts": [{"exp_labels": labels}]}


def silent(alert: str, at: str) -> dict[str, Any]:
    return {"eval_time": at, "alertname": alert, "exp_alerts": []}


ALERT_SCENARIOS: list[dict[str, Any]] = [
    {
        "name": "the leader goes away and nobody takes over",
        "interval": "1m",
        "input_series": [
            {"series": 'gangq_leader{pod="gangq-0"}', "values": "1x5 0x15"},
            {"series": 'gangq_leader{pod="gangq-1"}', "values": "0x20"},
        ],
        "alert_rule_test": [
            silent("GangqLeaderMissing", "4m"),
            firing("GangqLeaderMissing", "12m", severity="critical"),
            silent("GangqSeveralLeaders", "12m"),
        ],
    },
    {
        "name": "two replicas both claim to lead",
        "interval": "1m",
        "input_series": [
            {"series": 'gangq_leader{pod="gangq-0"}', "values": "1x10"},
            {"series": 'gangq_leader{pod="gangq-1"}', "values": "0x3 1x7"},
        ],
        "alert_rule_test": [firing("GangqSeveralLeaders", "8m", severity="critical")],
    },
    {
        "name": "one replica loses PostgreSQL",
        "interval": "1m",
        "input_series": [
            {"series": 'gangq_database_up{pod="gangq-0"}', "values": "1x10"},
            {"series": 'gangq_database_up{pod="gangq-1"}', "values": "1x3 0x7"},
        ],
        "alert_rule_test": [
            silent("GangqDatabaseUnreachable", "4m"),
            firing("GangqDatabaseUnreachable", "8m", severity="critical", pod="gangq-1"),
        ],
    },
    {
        "name": "jobs wait for hours and nothing is admitted",
        "interval": "5m",
        "input_series": [
            {"series": 'gangq_queue_oldest_pending_seconds{tier="training"}', "values": "0+300x40"},
            {"series": 'gangq_admissions_total{tier="training"}', "values": "7x40"},
        ],
        "alert_rule_test": [
            silent("GangqQueueStuck", "50m"),
            firing("GangqQueueStuck", "100m", severity="warning", tier="training"),
        ],
    },
    {
        "name": "admissions keep flowing while a big gang waits",
        "interval": "5m",
        "input_series": [
            {"series": 'gangq_queue_oldest_pending_seconds{tier="training"}', "values": "0+300x40"},
            {"series": 'gangq_admissions_total{tier="small"}', "values": "0+1x40"},
        ],
        "alert_rule_test": [silent("GangqQueueStuck", "150m")],
    },
    {
        "name": "gangs keep failing to start",
        "interval": "1m",
        "input_series": [
            {
                "series": 'gangq_gang_start_failures_total{tier="training",reason="timeout"}',
                "values": "0 1 2 3 4 5 6 7 8 9 10",
            }
        ],
        "alert_rule_test": [
            silent("GangqGangStartFailures", "2m"),
            firing(
                "GangqGangStartFailures",
                "8m",
                severity="warning",
                tier="training",
                reason="timeout",
            ),
        ],
    },
    {
        "name": "the API server refuses gangq's claim allocations, until RBAC is fixed",
        "interval": "1m",
        "input_series": [
            {
                "series": 'gangq_api_errors_total{resource="resourceclaims",code="422"}',
                "values": "0x5 1 2 2 3 3 3 3x40",
            }
        ],
        "alert_rule_test": [
            silent("GangqWritesRefused", "4m"),
            firing(
                "GangqWritesRefused",
                "8m",
                severity="critical",
                resource="resourceclaims",
                code="422",
            ),
            silent("GangqWritesRefused", "40m"),
        ],
    },
    {
        "name": "jobs pending but the cycle stopped",
        "interval": "1m",
        "input_series": [
            {"series": 'gangq_queue_pending_jobs{tier="training",tenant="ml"}', "values": "3x30"},
            {"series": "gangq_scheduling_cycle_seconds_count", "values": "0+1x5 5x25"},
        ],
        "alert_rule_test": [
            silent("GangqSchedulingCycleStalled", "8m"),
            firing("GangqSchedulingCycleStalled", "25m", severity="critical"),
        ],
    },
]


def test_promtool_alert_scenarios(tmp_path: Path) -> None:
    """Each alert fires in its scenario and stays silent before (annotations left out)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package `prometheus`)")
    groups = [
        {
            **group,
            "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in group["rules"]],
        }
        for group in rule_groups()
    ]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    tests = [{k: v for k, v in s.items() if k != "name"} for s in ALERT_SCENARIOS]
    (tmp_path / "tests.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests})
    )
    result = subprocess.run(
        [promtool, "test", "rules", "tests.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert {
        case["alertname"]
        for s in ALERT_SCENARIOS
        for case in s["alert_rule_test"]
        if case["exp_alerts"]
    } >= REQUIRED_ALERTS
