"""API writes as the API server counts them: `apiserver_request_total` read from `/metrics`.

Owns reading the counters, the difference between two readings and the per-job figures of
`gangq bench e2e` (by verb and resource, and in total). It must not judge them against a budget.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"})


def parse(text: str) -> Counter[str]:
    """Successful writes by `VERB resource[/subresource]` from a `/metrics` page."""
    found: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            labels = sample.labels
            if labels.get("verb") not in WRITE_VERBS or not sample.name.endswith("_total"):
                continue
            if not str(labels.get("code", "")).startswith("2"):
                continue
            sub = labels.get("subresource") or ""
            key = f"{labels['verb']} {labels['resource']}" + (f"/{sub}" if sub else "")
            found[key] += int(sample.value)
    return found


async def read(configuration: Any) -> Counter[str]:
    """The server's write counters now (kubernetes-asyncio's configuration gives the address)."""
    headers = {"Authorization": (await configuration.get_api_key_with_prefix("BearerToken")) or ""}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{configuration.host}/metrics", headers=headers) as response,
    ):
        response.raise_for_status()
        return parse(await response.text())


def per_job(
    before: Counter[str], after: Counter[str], *, jobs: int, submitted: Counter[str]
) -> dict[str, Any]:
    """Writes per job between two readings, less the ones the bench made itself (`submitted`)."""
    spent = after - before - submitted
    by_kind = {key: round(value / jobs, 2) for key, value in sorted(spent.items()) if value}
    return {
        "api_writes_per_job": by_kind,
        "api_writes_per_job_total": round(sum(spent.values()) / jobs, 2),
    }
