"""A torchrun training loop that saves checkpoints and reports each one to gangq.

gangq counts the work an eviction would destroy from the last checkpoint a job reports (since its
start when it reports none), so it prefers to evict gangs that just saved and can avoid evicting
one that would lose hours. Rank 0 saves the model every CHECKPOINT_INTERVAL_SECONDS to shared
storage and then patches its own TrainingJob with the annotation `gangq.dev/last-checkpoint`
(the time it saved, RFC3339), using the pod's service account: bind the ClusterRole
`gangq-checkpoint-reporter` to it (trainingjob.yaml does). A restarted or requeued gang resumes
from the checkpoint.

A job with `spec.preemption.checkpointGraceSeconds` is asked before gangq evicts it: gangq
annotates its pods with `gangq.dev/checkpoint-requested` (the time of the request), which every
container reads in /etc/gangq/podinfo/annotations (a downward-API volume the kubelet keeps
current). Rank 0 looks at that file about once a second; when the request appears or changes,
the gang saves and reports at once, and gangq evicts it right after the report instead of at
the end of the grace, so the eviction loses only the steps since. Started by trainingjob.yaml as

    torchrun --nnodes=$GANGQ_REPLICAS --nproc_per_node=$GANGQ_DEVICES_PER_REPLICA \
        --node_rank=$NODE_RANK --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT train.py
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

CHECKPOINT = Path(os.environ.get("CHECKPOINT_DIR", "/checkpoints")) / "model.pt"
INTERVAL_S = float(os.environ.get("CHECKPOINT_INTERVAL_SECONDS", "600"))
STEPS = int(os.environ.get("TRAIN_STEPS", "100000"))
ANNOTATION = "gangq.dev/last-checkpoint"
PODINFO = Path(os.environ.get("GANGQ_PODINFO", "/etc/gangq/podinfo")) / "annotations"
REQUEST = "gangq.dev/checkpoint-requested"
REQUEST_POLL_S = 1.0


def checkpoint_request() -> str | None:
    """The pod's current checkpoint request, if any: the downward-API file has one
    `key="value"` line per annotation (values quoted as Go does; the request is a plain time)."""
    try:
        lines = PODINFO.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key == REQUEST:
            return value.strip('"')
    return None


def report_checkpoint(saved_at: datetime) -> None:
    """Tell gangq: patch our own TrainingJob (JOB_NAME, JOB_NAMESPACE from the downward API).

    A failed report only costs accuracy (gangq then counts from the previous report), so it
    is logged and training goes on. Without the Python client, the same patch from a shell:
    kubectl annotate trainingjob "$JOB_NAME" gangq.dev/last-checkpoint="$(date -u +%FT%TZ)" \
        --overwrite
    """
    from kubernetes import client, config  # pip install kubernetes

    stamp = saved_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        config.load_incluster_config()
        client.CustomObjectsApi().patch_namespaced_custom_object(
            "gangq.dev",
            "v1alpha1",
            os.environ["JOB_NAMESPACE"],
            "trainingjobs",
            os.environ["JOB_NAME"],
            {"metadata": {"annotations": {ANNOTATION: stamp}}},
        )
    except Exception as error:  # a lost report must not stop training
        print(f"checkpoint report {stamp} not sent: {error}", flush=True)


def save(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """Write to a temporary file, then rename: a checkpoint is whole or absent."""
    partial = CHECKPOINT.with_suffix(".partial")
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
    torch.save(state, partial)
    os.replace(partial, CHECKPOINT)


def main() -> None:
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, local_rank = dist.get_rank(), int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = 0
    if CHECKPOINT.exists():
        state = torch.load(CHECKPOINT, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
    last_save = last_poll = time.monotonic()
    answered: str | None = None  # the request last answered; one already there is answered too
    while step < STEPS:
        batch = torch.randn(64, 1024, device=device)
        loss = torch.nn.functional.mse_loss(ddp(batch), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        # Every rank takes the same decision, so the barrier below is reached by all.
        now = time.monotonic()
        asked = False
        if rank == 0 and now - last_poll >= REQUEST_POLL_S:
            last_poll, request = now, checkpoint_request()
            asked, answered = request not in (None, answered), request or answered
        due = torch.tensor([asked or now - last_save >= INTERVAL_S], device=device)
        dist.broadcast(due, src=0)
        if due.item():
            if rank == 0:
                save(model, optimizer, step)
                report_checkpoint(datetime.now(UTC))
            dist.barrier()
            last_save = time.monotonic()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
