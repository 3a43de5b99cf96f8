"""What each launcher runs on one node of a job: the ``MAD_MULTI_NODE_RUNNER`` argv, the
environment and the files to write first.

:func:`node_launch` is pure (no I/O): given a :class:`~madengine.launch.spec.DistributedSpec` and
a :class:`NodePlacement` (this node's rank, the rendezvous address and port, its devices, every
node's address, the work folder as the script sees it) it returns a :class:`NodeLaunch`. The
executors (local, docker, Slurm, Kubernetes) place nodes; this module only says what each node
runs. The script-facing contract is the reference's: scripts call ``$MAD_MULTI_NODE_RUNNER
script.py``. That variable is expanded unquoted by the shell, so every argument of a runner is a
plain word (:data:`~madengine.launch.spec.SHELL_WORD`); anything else is refused, never quoted.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex
from typing import Callable, Mapping

from madengine.core.errors import LaunchError
from madengine.launch.network import SOCKET_IFNAME_VARS
from madengine.launch.spec import SHELL_WORD, DistributedSpec

#: per-rank logs go under ``<workspace>/madengine_ranks/node-<rank>`` (also ``MAD_RANK_LOG_DIR``)
RANK_LOG_FOLDER = "madengine_ranks"
#: files madengine writes for a launcher (the DeepSpeed hostfile) go under ``<workspace>/madengine_launch``
LAUNCH_FOLDER = "madengine_launch"
HOSTFILE = f"{LAUNCH_FOLDER}/hostfile"
#: DeepSpeed on several nodes: the script that starts this node's workers (see _deepspeed_nodes)
DEEPSPEED_NODE_SCRIPT = f"{LAUNCH_FOLDER}/deepspeed-node.sh"
DEFAULT_PORT = 29500
PRIMUS_DEFAULT_CONFIG = "exp_pretrain.yaml"
#: the environment every launcher sets (the contract of MAD scripts, plus madengine's own)
COMMON_ENV = ("MAD_LAUNCHER_TYPE", "MAD_MULTI_NODE_RUNNER", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NNODES",
              "NODE_RANK", "NPROC_PER_NODE", "MAD_DISTRIBUTED_BACKEND")
_ADDRESS = re.compile(r"^[A-Za-z0-9_.:\[\]-]+$")
#: a launcher's own part of a node's launch: runner argv, its own variables, files to write
_Plan = tuple[list[str], dict[str, object], dict[str, str]]


@dataclasses.dataclass(frozen=True)
class NodePlacement:
    """Where one node of a job runs, as its executor placed it.

    ``devices``: the GPU indices this node gives the job (empty on a CPU host). ``hosts``: every
    node's address by node rank, when known (DeepSpeed's hostfile and SGLang's node list need it
    on several nodes). ``workspace``: the work folder as the script sees it (``/myworkspace`` in a
    container); empty means no per-rank log folder and no written files. ``socket_ifname``: the
    interface this node reaches the rendezvous through, for NCCL and Gloo
    (:func:`~madengine.launch.network.rendezvous_interface`); empty leaves them to choose.
    """

    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = DEFAULT_PORT
    devices: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    workspace: str = ""
    socket_ifname: str = ""


@dataclasses.dataclass(frozen=True)
class NodeLaunch:
    """What one node runs: ``runner`` is ``MAD_MULTI_NODE_RUNNER`` as argv (empty for launchers
    whose scripts spawn their own workers), ``env`` the variables to add to the run's environment
    (``MAD_MULTI_NODE_RUNNER`` among them), ``files`` texts to write first, by path relative to
    the workspace."""

    launcher: str
    runner: tuple[str, ...]
    env: Mapping[str, str]
    files: Mapping[str, str]
    nnodes: int
    nproc_per_node: int
    node_rank: int
    backend: str
    #: the per-rank log folder as the script sees it ('' without a workspace); see docs/distributed.md
    rank_log_dir: str = ""
    #: sglang-disagg: this node's role (proxy, prefill, decode); '' for other launchers
    role: str = ""

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def global_ranks(self) -> range:
        """The global ranks of this node's workers (local rank ``i`` is ``global_ranks[i]``)."""
        return range(self.node_rank * self.nproc_per_node, (self.node_rank + 1) * self.nproc_per_node)


def rank_log_subdir(node_rank: int) -> str:
    """The per-rank log folder of node ``node_rank``, relative to the workspace."""
    return f"{RANK_LOG_FOLDER}/node-{node_rank}"


@dataclasses.dataclass(frozen=True)
class _Node:
    """The resolved numbers of one node, shared by every launcher's function."""

    spec: DistributedSpec
    place: NodePlacement
    nproc: int
    backend: str
    rank_log_dir: str

    @property
    def world(self) -> int:
        return self.spec.nnodes * self.nproc

    @property
    def static(self) -> bool:
        """Rendezvous at MASTER_ADDR:MASTER_PORT (several nodes, or a port the user chose) rather
        than torchrun's ``--standalone`` store on a free port of its own."""
        return self.spec.multi_node or self.spec.master_port is not None


# -- launchers -----------------------------------------------------------------------------------
def _torchrun_argv(node: _Node) -> list[str]:
    if not node.static:
        return ["torchrun", "--standalone", f"--nproc_per_node={node.nproc}"]
    place = node.place
    return ["torchrun", f"--nnodes={node.spec.nnodes}", f"--nproc_per_node={node.nproc}",
            f"--node_rank={place.node_rank}", f"--master_addr={place.master_addr}",
            f"--master_port={place.master_port}"]


def _torchrun_logs(node: _Node) -> dict[str, object]:
    # torchrun reads any option from PET_<OPTION>: the per-rank log folder goes there, not into
    # the runner, so a work folder with a space in its path never breaks the unquoted runner
    if not node.rank_log_dir:
        return {}
    return {"PET_LOG_DIR": node.rank_log_dir, "PET_TEE": "3"}


def _torchrun(node: _Node) -> _Plan:
    return _torchrun_argv(node), _torchrun_logs(node), {}


def _megatron(node: _Node) -> _Plan:
    spec = node.spec
    env = _torchrun_logs(node)
    env.update(TENSOR_MODEL_PARALLEL_SIZE=spec.tensor_parallel_size or (node.nproc if spec.multi_node
                                                                        else min(node.nproc, 8)),
               PIPELINE_MODEL_PARALLEL_SIZE=spec.pipeline_parallel_size or spec.nnodes,
               CONTEXT_PARALLEL_SIZE=spec.context_parallel_size or 1)
    return _torchrun_argv(node), env, {}


def _torchtitan(node: _Node) -> _Plan:
    spec = node.spec
    env = _torchrun_logs(node)
    env.update(TORCHTITAN_TENSOR_PARALLEL_SIZE=spec.tensor_parallel_size or node.nproc,
               TORCHTITAN_PIPELINE_PARALLEL_SIZE=spec.pipeline_parallel_size or spec.nnodes,
               TORCHTITAN_CONTEXT_PARALLEL_SIZE=spec.context_parallel_size or 1,
               TORCHTITAN_FSDP_ENABLED=1 if spec.multi_node else 0)
    return _torchrun_argv(node), env, {}


def _deepspeed(node: _Node) -> _Plan:
    if node.spec.multi_node:
        return _deepspeed_nodes(node)
    # no --enable_each_rank_log: it sends the workers' output to files only, and the run's log would
    # then miss the 'performance:' lines
    return ["deepspeed", f"--num_gpus={node.nproc}", f"--master_port={node.place.master_port}"], {}, {}


#: DeepSpeed on one node of several. Every node starts its own workers (its executor placed it);
#: none reaches the others by ssh. Releases with --no_ssh do that themselves. Older ones lack it
#: (their runner would ssh into every host of the hostfile): this node is then started from the
#: hostfile by DeepSpeed's per-node launcher, with the arguments 'deepspeed --no_ssh' gives it.
_DEEPSPEED_NODE = """#!/bin/bash
# madengine: DeepSpeed on node $NODE_RANK of $NNODES, its workers started here (no ssh to the others)
set -eu
hostfile=@HOSTFILE@
if deepspeed --help 2>/dev/null | grep -q -E -e '--no_ssh([^_[:alnum:]]|$)'; then
  exec deepspeed --hostfile="$hostfile" --no_ssh --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" \\
    --master_port="$MASTER_PORT" "$@"
fi
echo "madengine: this DeepSpeed has no --no_ssh: node $NODE_RANK starts from $hostfile with deepspeed.launcher.launch" >&2
# DeepSpeed's own reading of the hostfile, onto fd 3: what it prints on import goes to the log
world_info=$(python3 -c 'import os, sys
from deepspeed.launcher.runner import encode_world_info, fetch_hostfile, parse_inclusion_exclusion
os.write(3, encode_world_info(parse_inclusion_exclusion(fetch_hostfile(sys.argv[1]), "", "")).encode())' \\
  "$hostfile" 3>&1 1>&2)
exec python3 -u -m deepspeed.launcher.launch --world_info="$world_info" --node_rank="$NODE_RANK" \\
  --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" "$@"
"""


def _deepspeed_nodes(node: _Node) -> _Plan:
    """The same script on every node (a Kubernetes job gives every pod the same files): this node's
    rank and rendezvous come from the variables every launch sets."""
    files: dict[str, str] = {}
    hostfile = node.spec.hostfile or _hostfile_path(node)
    if not node.spec.hostfile:
        files[HOSTFILE] = "".join(f"{host} slots={node.nproc}\n" for host in node.place.hosts)
    if not node.place.workspace:
        raise LaunchError("deepspeed on several nodes needs a work folder for its launch script",
                          field="distributed.nnodes", hint="run it through an executor (Slurm, Kubernetes)")
    files[DEEPSPEED_NODE_SCRIPT] = _DEEPSPEED_NODE.replace("@HOSTFILE@", shlex.quote(hostfile))
    return ["bash", posixpath.join(node.place.workspace, DEEPSPEED_NODE_SCRIPT)], {}, files


def _hostfile_path(node: _Node) -> str:
    if len(node.place.hosts) != node.spec.nnodes:
        raise LaunchError(f"deepspeed on {node.spec.nnodes} nodes needs a hostfile or the address of every node "
                          f"({len(node.place.hosts)} known)", field="distributed.deepspeed.hostfile",
                          hint="give distributed.deepspeed.hostfile, or run through an executor that knows its nodes")
    if not node.place.workspace:
        raise LaunchError("deepspeed on several nodes needs a work folder for its hostfile",
                          field="distributed.deepspeed.hostfile", hint="give distributed.deepspeed.hostfile")
    return posixpath.join(node.place.workspace, HOSTFILE)


def _serving(prefix: str) -> Callable[[_Node], _Plan]:
    """vLLM and SGLang spawn their own workers: one server per node, tensor parallel over its
    devices; several nodes are data parallel (a server each), as in the reference."""
    def launch(node: _Node) -> _Plan:
        spec = node.spec
        env: dict[str, object] = {f"{prefix}_TENSOR_PARALLEL_SIZE": spec.tensor_parallel_size or node.nproc,
                                  f"{prefix}_PIPELINE_PARALLEL_SIZE": spec.pipeline_parallel_size or 1}
        if prefix == "VLLM":
            env["VLLM_DISTRIBUTED_BACKEND"] = "none" if spec.multi_node else "auto"
        return [], env, {}
    return launch


def _sglang_disagg(node: _Node) -> _Plan:
    spec, place = node.spec, node.place
    if len(place.hosts) != spec.nnodes:
        raise LaunchError(f"sglang-disagg on {spec.nnodes} nodes needs the address of every node "
                          f"({len(place.hosts)} known)", field="distributed.nnodes",
                          hint="run it through an executor that knows its nodes (Slurm, Kubernetes)")
    env: dict[str, object] = {"SGLANG_DISAGG_MODE": "enabled", "SGLANG_DISAGG_PREFILL_NODES": spec.prefill_nodes,
           "SGLANG_DISAGG_DECODE_NODES": spec.decode_nodes, "SGLANG_DISAGG_TOTAL_NODES": spec.nnodes,
           "SGLANG_DISAGG_ROLE": disagg_role(spec, place.node_rank),
           "SGLANG_TP_SIZE": spec.tensor_parallel_size or node.nproc, "SGLANG_NODE_RANK": place.node_rank,
           "SGLANG_NODE_IPS": ",".join(place.hosts),
           # the names the reference's disaggregation scripts read: x prefill and y decode nodes
           "xP": spec.prefill_nodes, "yD": spec.decode_nodes}
    return [], env, {}


def disagg_role(spec: DistributedSpec, node_rank: int) -> str:
    """An SGLang disaggregated node's role: node 0 the proxy, then the prefill, then the decode nodes."""
    if node_rank == 0:
        return "proxy"
    return "prefill" if node_rank <= (spec.prefill_nodes or 0) else "decode"


def _primus(node: _Node) -> _Plan:
    spec = node.spec
    env: dict[str, object] = {"PRIMUS_CONFIG_PATH": spec.primus_config_path or PRIMUS_DEFAULT_CONFIG}
    if spec.primus_cli_extra:
        env["PRIMUS_CLI_EXTRA"] = spec.primus_cli_extra
    if spec.primus_backend:  # BACKEND is what Primus's run scripts read
        env["BACKEND"] = env["PRIMUS_BACKEND"] = spec.primus_backend
    return [], env, {}


def _none(node: _Node) -> _Plan:
    return [], {}, {}


_LAUNCH = {"torchrun": _torchrun, "torchtitan": _torchtitan, "megatron-lm": _megatron, "deepspeed": _deepspeed,
           "vllm": _serving("VLLM"), "sglang": _serving("SGLANG"), "sglang-disagg": _sglang_disagg,
           "primus": _primus, "none": _none}


# -- one node ------------------------------------------------------------------------------------
def procs_per_node(spec: DistributedSpec, devices: tuple[int, ...] | list[int]) -> int:
    """Ranks per node: the spec's ``nproc_per_node``, else one per device; on a node without
    devices its ``cpu_nproc_per_node``, else 1."""
    return spec.nproc_per_node or len(devices) or spec.cpu_nproc_per_node or 1


def collective_backend(spec: DistributedSpec, devices: tuple[int, ...] | list[int]) -> str:
    """The spec's ``backend``, else nccl on a node with GPUs (torch's nccl is RCCL on ROCm), gloo without."""
    return spec.backend or ("nccl" if devices else "gloo")


def _check_placement(spec: DistributedSpec, place: NodePlacement, nproc: int) -> None:
    if not 0 <= place.node_rank < spec.nnodes:
        raise LaunchError(f"node rank {place.node_rank} is outside a job of {spec.nnodes} node(s)",
                          field="NODE_RANK", hint=f"use 0 to {spec.nnodes - 1}")
    if not 0 < place.master_port < 65536:
        raise LaunchError(f"master port {place.master_port} is not a TCP port", field="distributed.master_port")
    if not _ADDRESS.match(place.master_addr):
        raise LaunchError(f"master address {place.master_addr!r} is not a host name or IP address",
                          field="MASTER_ADDR")
    for host in place.hosts:
        if not _ADDRESS.match(host):
            raise LaunchError(f"node address {host!r} is not a host name or IP address", field="MAD_NODE_HOSTS")
    if place.devices and nproc > len(place.devices):
        raise LaunchError(f"nproc_per_node {nproc} is more than the {len(place.devices)} device(s) this node gives "
                          "the job", field="distributed.nproc_per_node",
                          hint=f"set nproc_per_node to {len(place.devices)} or fewer")
    _check_parallel_sizes(spec, nproc)


def _check_parallel_sizes(spec: DistributedSpec, nproc: int) -> None:
    """Model-parallel groups must tile the world (Megatron-LM and TorchTitan refuse otherwise)."""
    if spec.launcher not in ("megatron-lm", "torchtitan"):
        return
    sizes = [s for s in (spec.tensor_parallel_size, spec.pipeline_parallel_size, spec.context_parallel_size) if s]
    product = 1
    for size in sizes:
        product *= size
    world = spec.nnodes * nproc
    if sizes and world % product:
        raise LaunchError(f"tensor × pipeline × context parallel sizes ({product}) do not divide the world size "
                          f"{world} ({spec.nnodes} node(s) × {nproc})", field="distributed.tensor_parallel_size",
                          hint="choose sizes whose product divides nnodes × nproc_per_node")


def node_launch(spec: DistributedSpec, place: NodePlacement) -> NodeLaunch:
    """What node ``place.node_rank`` of ``spec``'s job runs. Raises :class:`LaunchError` for a
    placement the spec cannot use (more ranks than devices, a node list that is missing)."""
    nproc = procs_per_node(spec, place.devices)
    _check_placement(spec, place, nproc)
    backend = collective_backend(spec, place.devices)
    rank_logs = posixpath.join(place.workspace, rank_log_subdir(place.node_rank)) if place.workspace else ""
    node = _Node(spec, place, nproc, backend, rank_logs)
    argv, own_env, files = _LAUNCH[spec.launcher](node)
    for word in argv:
        if not SHELL_WORD.match(word):
            raise LaunchError(f"runner argument {word!r} has characters a shell would split or expand",
                              field="MAD_MULTI_NODE_RUNNER", hint="use paths and addresses without spaces or quotes")
    env = {"MAD_LAUNCHER_TYPE": spec.launcher, "MAD_MULTI_NODE_RUNNER": shlex.join(argv),
           "MASTER_ADDR": place.master_addr, "MASTER_PORT": str(place.master_port), "WORLD_SIZE": str(node.world),
           "NNODES": str(spec.nnodes), "NODE_RANK": str(place.node_rank), "NPROC_PER_NODE": str(nproc),
           "MAD_DISTRIBUTED_BACKEND": backend}
    if rank_logs:
        env["MAD_RANK_LOG_DIR"] = rank_logs
    if place.hosts:
        env["MAD_NODE_HOSTS"] = ",".join(place.hosts)
    if place.socket_ifname:
        env.update(dict.fromkeys(SOCKET_IFNAME_VARS, place.socket_ifname))
    env.update({name: str(value) for name, value in own_env.items()})
    return NodeLaunch(launcher=spec.launcher, runner=tuple(argv), env=env, files=dict(files), nnodes=spec.nnodes,
                      nproc_per_node=nproc, node_rank=place.node_rank, backend=backend, rank_log_dir=rank_logs,
                      role=disagg_role(spec, place.node_rank) if spec.launcher == "sglang-disagg" else "")
