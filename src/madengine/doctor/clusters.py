"""The schedulers a run may hand models to: Slurm (``sinfo`` answers) and Kubernetes (the
kubeconfig and context the ``k8s`` block names exist). Checked when ``--executor`` or the context
names them; a missing tool or file is a FAIL line with its fix."""

from __future__ import annotations

from typing import Any, Mapping

from madengine.core.errors import ConfigError, ServiceError
from madengine.doctor.checks import FAIL, PASS, Check, skipped
from madengine.distributed.slurm_commands import SlurmCommands
from madengine.k8s.kubeconfig import resolve_cluster
from madengine.k8s.settings import block_of, k8s_settings

SLURM, KUBERNETES = "slurm", "kubernetes"
#: seconds sinfo has to answer
SINFO_TIMEOUT = 30.0


def wants_slurm(executor: str, context: Mapping[str, Any]) -> bool:
    return executor == "slurm" or bool(context.get("slurm"))


def wants_k8s(executor: str, context: Mapping[str, Any]) -> bool:
    return executor == "k8s" or bool(block_of(context))


def check_slurm(executor: str, context: Mapping[str, Any]) -> Check:
    if not wants_slurm(executor, context):
        return skipped(SLURM, "not named (--executor slurm or a 'slurm' context block)")
    try:
        result = SlurmCommands(timeout=SINFO_TIMEOUT).sinfo("%P|%a|%D|%T")
    except ServiceError as exc:
        return Check(SLURM, FAIL, exc.message, exc.hint or "", need="slurm")
    if result.returncode != 0:
        said = next((line.strip() for line in (result.stderr or result.stdout).splitlines()
                     if "fatal" in line or "error" in line), "") or f"exit {result.returncode}"
        return Check(SLURM, FAIL, f"sinfo cannot reach the Slurm controller: {said[:300]}",
                     "check slurm.conf (or SLURM_CONF) and that slurmctld runs", need="slurm")
    partitions: dict[str, dict[str, int]] = {}
    for line in result.stdout.splitlines():
        cells = line.strip().split("|")
        if len(cells) == 4 and cells[2].isdigit():
            states = partitions.setdefault(cells[0], {})
            states[cells[3]] = states.get(cells[3], 0) + int(cells[2])
    if not partitions:
        return Check(SLURM, FAIL, "sinfo lists no partition", "ask the cluster's admins for a partition",
                     need="slurm")
    shown = "; ".join(f"{name}: " + ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
                      for name, states in sorted(partitions.items()))
    return Check(SLURM, PASS, f"sinfo answers: {shown}", data={"partitions": partitions})


def check_kubeconfig(executor: str, context: Mapping[str, Any], environ: Mapping[str, str]) -> Check:
    """The kubeconfig and context of the ``k8s`` block (a malformed block is exit 2 before this)."""
    if not wants_k8s(executor, context):
        return skipped(KUBERNETES, "not named (--executor k8s or a 'k8s' context block)")
    settings = k8s_settings(block_of(context))
    try:
        target = resolve_cluster(settings, environ)
    except ConfigError as exc:
        return Check(KUBERNETES, FAIL, exc.message, exc.hint or "", need="k8s")
    if target.in_cluster:
        return Check(KUBERNETES, PASS, f"in a pod: the service account's cluster, namespace {target.namespace}")
    return Check(KUBERNETES, PASS, f"kubeconfig {target.kubeconfig}, context {target.context}, namespace "
                 f"{target.namespace} (the cluster itself is asked when a run starts)",
                 data={"kubeconfig": target.kubeconfig, "context": target.context, "namespace": target.namespace})
