"""Distributed launchers: the ``distributed`` block of a model or context, and what each node of a
job runs (docs/distributed.md).

Public surface:

* :class:`DistributedSpec` — the typed block; :func:`parse_distributed` (one block as written),
  :func:`check_block` / :func:`merge_blocks` / :func:`spec_from_block` (the steps of a model's
  block under a context's, key by key); :data:`LAUNCHERS`, :data:`BACKENDS`.
* :class:`NodePlacement` → :func:`node_launch` → :class:`NodeLaunch` — one node's
  ``MAD_MULTI_NODE_RUNNER``, environment and files (pure); :func:`procs_per_node`,
  :func:`collective_backend` (what ``"auto"`` resolves to on a node), :func:`disagg_role`, :func:`rank_log_subdir`; :data:`RANK_LOG_FOLDER`, :data:`HOSTFILE`.
* :mod:`madengine.launch.ports` — :func:`free_port`, :func:`port_taken`, :func:`check_port_free`;
  :mod:`madengine.launch.network` — :func:`rendezvous_interface` (the interface NCCL and Gloo talk
  through). The only modules here that touch the host.

Imports only :mod:`madengine.core`, so every executor (local, docker, Slurm, Kubernetes) can use it.
"""

from madengine.launch.launchers import (COMMON_ENV, DEFAULT_PORT, HOSTFILE, LAUNCH_FOLDER, RANK_LOG_FOLDER,
                                        NodeLaunch, NodePlacement, collective_backend, disagg_role, node_launch,
                                        procs_per_node, rank_log_subdir)
from madengine.launch.network import SOCKET_IFNAME_VARS, rendezvous_interface
from madengine.launch.ports import check_port_free, free_port, port_taken
from madengine.launch.spec import (BACKENDS, LAUNCHERS, DistributedSpec, check_block, merge_blocks,
                                   parse_distributed, spec_from_block)

__all__ = ["BACKENDS", "COMMON_ENV", "DEFAULT_PORT", "HOSTFILE", "LAUNCHERS", "LAUNCH_FOLDER", "RANK_LOG_FOLDER",
           "SOCKET_IFNAME_VARS", "DistributedSpec", "NodeLaunch", "NodePlacement", "check_block", "check_port_free",
           "collective_backend",
           "disagg_role", "free_port", "merge_blocks", "node_launch", "parse_distributed", "port_taken",
           "procs_per_node", "rank_log_subdir", "rendezvous_interface", "spec_from_block"]
