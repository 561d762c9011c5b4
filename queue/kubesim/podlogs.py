"""Container logs of simulated pods: what `GET /api/v1/namespaces/{ns}/pods/{name}/log` serves.

Owns the lines each container wrote, per pod instance (uid) and container, for its current
and its previous run, and the answers of the API server and kubelet for a log request: the
container choice (`container`, required when the pod has several), `previous`, `tailLines`,
and their errors, with the real messages. The simulated kubelets write (a container writes
its lines when it starts; a restart in place keeps the last run as the previous one); a deleted
pod's logs go with it.

A container writes the pod's annotation `sim.gangq.dev/log` (one line per line; `{pod}`,
`{container}` and `{restart}` become the pod's and the container's names and its restart
count), else one line naming its command. While it runs, the kubelet adds the lines of what
it sees change in its downward-API files (module `kubelet`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gangq.queue.kubesim import status

LOG_ANNOTATION = "sim.gangq.dev/log"


@dataclass(slots=True)
class _Runs:
    current: list[str] = field(default_factory=list)
    previous: list[str] | None = None


def lines_of(pod: Mapping[str, Any], container: Mapping[str, Any], *, restart: int) -> list[str]:
    """What a container writes when it starts."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    template = annotations.get(LOG_ANNOTATION)
    name = str(container.get("name"))
    if template is None:
        command = [*(container.get("command") or []), *(container.get("args") or [])]
        return [f"{name}: started {' '.join(map(str, command)) or container.get('image')}"]
    values = {"pod": (pod.get("metadata") or {}).get("name"), "container": name, "restart": restart}
    text = str(template)
    for key, value in values.items():
        text = text.replace(f"{{{key}}}", str(value))
    return text.splitlines()


@dataclass(eq=False)
class PodLogs:
    _pods: dict[str, dict[str, _Runs]] = field(default_factory=dict)

    def start(self, pod: Mapping[str, Any], *, restart: int) -> None:
        """Every container of `pod` starts a run; the run before becomes the previous one."""
        runs = self._pods.setdefault(str(pod["metadata"]["uid"]), {})
        for container in (pod.get("spec") or {}).get("containers") or []:
            name = str(container.get("name"))
            before = runs.get(name)
            runs[name] = _Runs(
                current=lines_of(pod, container, restart=restart),
                previous=None if before is None else before.current,
            )

    def write(self, pod: Mapping[str, Any], container: str, lines: list[str]) -> None:
        """A running container writes more lines to its current run."""
        runs = self._pods.setdefault(str(pod["metadata"]["uid"]), {})
        runs.setdefault(container, _Runs()).current.extend(lines)

    def forget(self, uid: str) -> None:
        self._pods.pop(uid, None)

    def read(self, pod: Mapping[str, Any], query: Mapping[str, str]) -> str:
        """The log text, or the `status.ApiError` the real server answers."""
        name = str(pod["metadata"]["name"])
        container = _container(pod, query.get("container", ""))
        previous = _flag(query, "previous")
        tail = _tail_lines(query, pod_name=name)
        if not (pod.get("spec") or {}).get("nodeName"):
            return ""  # not scheduled: the API server streams nothing (no kubelet to ask)
        statuses = {
            c.get("name"): c for c in (pod.get("status") or {}).get("containerStatuses") or []
        }
        found = statuses.get(container)
        if found is None:
            raise status.bad_request(
                f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
            )
        runs = self._pods.get(str(pod["metadata"]["uid"]), {}).get(container, _Runs())
        if previous:
            if "terminated" not in (found.get("lastState") or {}) or runs.previous is None:
                raise status.bad_request(
                    f'previous terminated container "{container}" in pod "{name}" not found'
                )
            lines = runs.previous
        else:
            lines = runs.current
        shown = lines if tail is None else lines[len(lines) - min(tail, len(lines)) :]
        return "".join(f"{line}\n" for line in shown)


def _container(pod: Mapping[str, Any], requested: str) -> str:
    """ValidateContainer of the API server: the only container by default, else one named."""
    spec = pod.get("spec") or {}
    name = pod["metadata"]["name"]
    containers = [str(c.get("name")) for c in spec.get("containers") or []]
    every = [str(c.get("name")) for c in spec.get("initContainers") or []] + containers
    if not requested:
        if len(containers) == 1:
            return containers[0]
        raise status.bad_request(
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(every)}]"
        )
    if requested not in every:
        raise status.bad_request(f"container {requested} is not valid for pod {name}")
    return requested


def _flag(query: Mapping[str, str], key: str) -> bool:
    value = query.get(key, "false").lower()
    if value not in ("true", "false", "1", "0", ""):
        raise status.bad_request(f'invalid value for {key}: "{query[key]}"')
    return value in ("true", "1")


def _tail_lines(query: Mapping[str, str], *, pod_name: str) -> int | None:
    value = query.get("tailLines")
    if value is None:
        return None
    if not value.lstrip("-").isdigit():
        raise status.bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax')
    if int(value) < 0:
        cause = status.invalid_value("tailLines", int(value), "must be greater than or equal to 0")
        raise status.invalid("PodLogOptions", "", pod_name, [cause])
    return int(value)
