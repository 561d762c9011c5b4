"""The scenario on its timeline: each step applied once what it waits for has been observed.

Owns applying TrainingJobs through the Kubernetes API (create, or merge the new spec into an
existing job, which is how `llm-prod` is scaled), waiting on step triggers and on the end of
the story, letting the gang checks feel time pass, and asking the REST API once why the
waiting gang waits. It must not judge the run.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gangq.queue.core.errors import GangqError
from gangq.queue.demo import ledger as ledger_module
from gangq.queue.demo import probe as probe_module
from gangq.queue.demo import scenario as scenario_module
from gangq.queue.demo import story

GROUP, VERSION, PLURAL = "gangq.dev", "v1alpha1", "trainingjobs"
POLL_SECONDS = 0.1
MERGE_PATCH = "application/merge-patch+json"


@dataclass(eq=False)
class Player:
    scenario: scenario_module.Scenario
    api_client: client.ApiClient
    observed: ledger_module.Ledger
    clock: Callable[[], float]
    probe: probe_module.Probe
    long_running: frozenset[str]
    """Tiers whose jobs never finish by themselves."""
    on_poll: Callable[[], None]
    """Called on every poll (progress output)."""
    applied: set[str] = field(default_factory=set)
    _asked_api: bool = False

    async def play(self, *, deadline: float, alive: Callable[[], None]) -> bool:
        """Apply every step, then wait for the story to end; True when time ran out first."""
        for step in self.scenario.steps:
            trigger = step.after
            if trigger is not None and not await self._wait(
                functools.partial(self._reached, trigger), deadline, alive
            ):
                self.observed.say(
                    self.clock(), f"gave up on step {step.number}: no {trigger.describe()}"
                )
                return True
            await self._apply(step)
        self.observed.say(self.clock(), "every step applied; waiting for the story to end")
        is_done = await self._wait(lambda: not self._outstanding(), deadline, alive)
        if not is_done:
            left = "; ".join(self._outstanding())
            self.observed.say(self.clock(), f"time is up ({deadline:.0f}s); still waiting: {left}")
        return not is_done

    def _outstanding(self) -> list[str]:
        return story.outstanding(
            self.observed,
            self.scenario.story,
            expected_jobs=len(self.applied),
            long_running=self.long_running,
        )

    def _reached(self, trigger: scenario_module.Trigger) -> bool:
        matching = [record for key, record in self.observed.jobs.items() if trigger.matches(key)]
        needed = trigger.count or sum(1 for key in self.applied if trigger.matches(key))
        reached = [record for record in matching if trigger.phase in record.phases]
        return needed > 0 and len(reached) >= needed

    async def _wait(
        self, condition: Callable[[], bool], deadline: float, alive: Callable[[], None]
    ) -> bool:
        while not condition():
            alive()
            now = self.clock()
            if now > deadline:
                return False
            self.observed.tick(at=now)
            self.on_poll()
            await self._ask_api_once()
            await asyncio.sleep(POLL_SECONDS)
        return True

    async def _ask_api_once(self) -> None:
        """Show through the REST API why the waiting gang waits (PRODUCT rule 10)."""
        waiting = self.observed.jobs.get(self.scenario.story.waiting)
        if self._asked_api or waiting is None or not story.actionable_reasons(waiting):
            return
        self._asked_api = True
        answer = await self.probe.pending_reason(waiting.key)
        self.observed.say(self.clock(), answer)

    async def _apply(self, step: scenario_module.Step) -> None:
        self.observed.say(self.clock(), f"step {step.number}: {step.title} ({step.file})")
        custom = client.CustomObjectsApi(self.api_client)
        for document in step.objects:
            namespace = document["metadata"]["namespace"]
            name = document["metadata"]["name"]
            try:
                await custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, document
                )
            except ApiException as error:
                if error.status != 409:
                    raise GangqError(
                        f"{step.file}: creating {namespace}/{name} failed: {error.status} "
                        f"{error.reason} {_body(error)}"
                    ) from error
                await self._update(custom, document, step=step)
            self.applied.add(scenario_module.job_key(document))

    async def _update(
        self, custom: Any, document: dict[str, Any], *, step: scenario_module.Step
    ) -> None:
        namespace, name = document["metadata"]["namespace"], document["metadata"]["name"]
        try:
            await custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                {"spec": document.get("spec") or {}},
                _content_type=MERGE_PATCH,
            )
        except ApiException as error:
            raise GangqError(
                f"{step.file}: updating {namespace}/{name} failed: {error.status} "
                f"{error.reason} {_body(error)}"
            ) from error


def _body(error: ApiException) -> str:
    body = error.body
    return body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
