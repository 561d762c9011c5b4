"""Request counters of the emulated API server, served at `/metrics` as kube-apiserver does.

Owns `apiserver_request_total{verb, resource, subresource, code}` in Prometheus text format,
so a bench can count the writes each job costs exactly as an operator would on a real server.
It must not change how any request is answered.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"})
METRIC = "apiserver_request_total"


@dataclass(eq=False)
class RequestCounts:
    counts: Counter[tuple[str, str, str, int]] = field(default_factory=Counter)

    def count(self, *, verb: str, resource: str, subresource: str, code: int) -> None:
        self.counts[(verb, resource, subresource, code)] += 1

    def exposition(self) -> str:
        lines = [
            f"# HELP {METRIC} Counter of apiserver requests by verb, resource and code.",
            f"# TYPE {METRIC} counter",
        ]
        for (verb, resource, subresource, code), value in sorted(self.counts.items()):
            labels = (
                f'verb="{verb}",resource="{resource}",subresource="{subresource}",code="{code}"'
            )
            lines.append(f"{METRIC}{{{labels}}} {value}")
        return "\n".join(lines) + "\n"
