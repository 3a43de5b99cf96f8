"""The ``distributed`` block of a models.json entry or a context, as a typed :class:`DistributedSpec`.

A block may come from two places: the model's entry and the context (``--additional-context`` or
its file). :func:`check_block` reads one block as written (types and ranges, one-line errors naming
the file and key); :func:`merge_blocks` lays the context's over the model's key by key (nested
launcher sections too); :func:`spec_from_block` makes the spec and checks what only the whole says
(the keys a launcher takes, the nodes SGLang's disaggregation needs).

Pure: no I/O, nothing imported beyond :mod:`madengine.core`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Sequence

from madengine.core.errors import LaunchError
from madengine.core.values import brief, port_number, whole_number

#: every launcher, in the order docs and messages list them
LAUNCHERS = ("torchrun", "torchtitan", "deepspeed", "megatron-lm", "vllm", "sglang", "sglang-disagg", "primus",
             "none")
#: other spellings users write (``megatron`` is what the reference's examples use)
LAUNCHER_ALIASES = {"megatron": "megatron-lm", "megatron_lm": "megatron-lm", "sglang_disagg": "sglang-disagg",
                    "torch_titan": "torchtitan", "deep_speed": "deepspeed"}
DEFAULT_LAUNCHER = "torchrun"
#: ``torch.distributed`` backends (``rccl`` is what ROCm users call torch's ``nccl``)
BACKENDS = ("nccl", "gloo", "mpi", "ucc", "xccl")
BACKEND_ALIASES = {"rccl": "nccl"}
#: ``nproc_per_node`` and ``backend`` left to the node (as torchrun's ``--nproc_per_node=auto``):
#: one rank per GPU the run gets, nccl with GPUs and gloo without; the spec holds it as ``None``
AUTO = "auto"
MAX_NODES = 100_000
MAX_PROCS_PER_NODE = 1024
MAX_PARALLEL_SIZE = 1 << 20
#: launchers that start one torchrun per node
TORCHRUN_FAMILY = ("torchrun", "torchtitan", "megatron-lm")
#: which launchers read each launcher-specific key (any other launcher refuses it: exit 2)
KEY_LAUNCHERS = {
    "tensor_parallel_size": ("megatron-lm", "torchtitan", "vllm", "sglang", "sglang-disagg"),
    "pipeline_parallel_size": ("megatron-lm", "torchtitan", "vllm", "sglang"),
    "context_parallel_size": ("megatron-lm", "torchtitan"),
    "deepspeed": ("deepspeed",),
    "sglang_disagg": ("sglang-disagg",),
    "primus": ("primus",),
}
_SECTIONS = {"deepspeed": ("hostfile",), "sglang_disagg": ("prefill_nodes", "decode_nodes"),
             "primus": ("config_path", "cli_extra", "backend")}
KNOWN_KEYS = ("launcher", "nnodes", "nproc_per_node", "cpu_nproc_per_node", "backend", "master_port", "port",
              "tensor_parallel_size", "pipeline_parallel_size", "context_parallel_size", *_SECTIONS)
#: Primus's BACKEND by the launcher word a model name starts with after ``primus_pretrain/`` (the
#: reference's naming: ``primus_pretrain/torchtitan_MI300X_qwen3_4B-pretrain``); MaxText is spelled
#: as Primus's run scripts expect it
PRIMUS_NAME_PREFIX = "primus_pretrain/"
PRIMUS_BACKENDS = {"megatron_bridge": "megatron_bridge", "moe_package": "moe_package", "torchtitan": "torchtitan",
                   "megatron": "megatron", "maxtext": "MaxText"}
#: a word a shell splits nowhere and expands nothing in (runner arguments are such words)
SHELL_WORD = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


@dataclasses.dataclass(frozen=True)
class DistributedSpec:
    """How one model's job is launched, before it is placed on nodes.

    ``None`` means "not given" (or ``"auto"``): ``nproc_per_node`` then is one rank per device the
    run gets (``cpu_nproc_per_node`` on a node without any, else 1), ``backend`` nccl with devices
    and gloo without, ``master_port`` a free port on one node and 29500 on several; the parallel
    sizes take each launcher's defaults (docs/distributed.md).
    """

    launcher: str = DEFAULT_LAUNCHER
    nnodes: int = 1
    nproc_per_node: int | None = None
    #: ranks on a node without GPUs when ``nproc_per_node`` is auto (a CPU host's DDP job)
    cpu_nproc_per_node: int | None = None
    backend: str | None = None
    master_port: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    context_parallel_size: int | None = None
    #: DeepSpeed: a hostfile of the user's (else one is written from the nodes' addresses)
    hostfile: str = ""
    #: SGLang disaggregation: prefill and decode nodes (node 0 is the proxy); set for sglang-disagg
    prefill_nodes: int | None = None
    decode_nodes: int | None = None
    #: Primus: its experiment config, extra CLI arguments and backend
    primus_config_path: str = ""
    primus_cli_extra: str = ""
    primus_backend: str = ""

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1

    def to_block(self) -> dict[str, Any]:
        """The spec as a ``distributed`` block (keys that are set only); ``check_block`` and
        ``spec_from_block`` of it give the spec back."""
        block: dict[str, Any] = {"launcher": self.launcher, "nnodes": self.nnodes}
        for key in ("nproc_per_node", "cpu_nproc_per_node", "backend", "master_port", "tensor_parallel_size",
                    "pipeline_parallel_size", "context_parallel_size"):
            if getattr(self, key) is not None:
                block[key] = getattr(self, key)
        if self.hostfile:
            block["deepspeed"] = {"hostfile": self.hostfile}
        if self.launcher == "sglang-disagg":
            block["sglang_disagg"] = {"prefill_nodes": self.prefill_nodes, "decode_nodes": self.decode_nodes}
        primus = {k: v for k, v in (("config_path", self.primus_config_path), ("cli_extra", self.primus_cli_extra),
                                    ("backend", self.primus_backend)) if v}
        if primus:
            block["primus"] = primus
        return block


# -- one block as written ------------------------------------------------------------------------
def _error(message: str, source: str, where: str, key: str, hint: str | None = None) -> LaunchError:
    return LaunchError(message, path=source, field=f"{where}.{key}", hint=hint)


def _count(value: Any, source: str, where: str, key: str, least: int, most: int) -> int:
    number = whole_number(value)
    if number is None or not least <= number <= most:
        raise _error(f"must be a whole number from {least} to {most}, got {brief(value)}", source, where, key)
    return number


def _ranks(value: Any, source: str, where: str) -> int | None:
    """``nproc_per_node``: a whole number of ranks, or ``"auto"`` (``None``: the node decides)."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return None
    number = whole_number(value)
    if number is None or not 1 <= number <= MAX_PROCS_PER_NODE:
        raise _error(f'must be a whole number from 1 to {MAX_PROCS_PER_NODE} or "{AUTO}", got {brief(value)}',
                     source, where, "nproc_per_node", hint=f'"{AUTO}" is one rank per GPU the run gets')
    return number


def _choice(value: Any, source: str, where: str, key: str, aliases: Mapping[str, str], valid: Sequence[str]) -> str:
    """One of ``valid`` (case and spaces aside, an alias taken as what it stands for)."""
    name = value.strip().lower() if isinstance(value, str) else value
    name = aliases.get(name, name) if isinstance(name, str) else name
    if name not in valid:
        raise _error(f"unknown {key} {brief(value)}", source, where, key, hint="use one of " + ", ".join(valid))
    return name


def _text(value: Any, source: str, where: str, key: str, *, word: bool = False) -> str:
    if not isinstance(value, str) or not value.strip() or not value.isprintable():
        raise _error(f"must be a non-empty string of printable characters, got {brief(value)}", source, where, key)
    value = value.strip()
    if word and not SHELL_WORD.match(value):
        raise _error(f"{brief(value)} has characters a shell would split or expand", source, where, key,
                     hint="use a path of letters, digits and _ - . / only")
    return value


def _section(name: str, value: Any, source: str, where: str) -> dict[str, Any]:
    """A launcher's own section (``deepspeed``, ``sglang_disagg``, ``primus``), checked key by key."""
    here = f"{where}.{name}"
    if not isinstance(value, Mapping):
        raise LaunchError(f"must be an object, got {brief(value)}", path=source, field=here,
                          hint=f"e.g. {{\"{name}\": {{\"{_SECTIONS[name][0]}\": ...}}}}")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key not in _SECTIONS[name]:
            raise _error(f"unknown key {brief(key)}", source, here, str(key),
                         hint="known keys: " + ", ".join(_SECTIONS[name]))
        if item is None:
            out[key] = None
            continue
        if name == "sglang_disagg":
            out[key] = _count(item, source, here, key, 1, MAX_NODES)
        elif key == "cli_extra" and item == "":
            out[key] = ""  # no extra arguments
        else:
            out[key] = _text(item, source, here, key, word=name == "deepspeed")
    return out


def _value(key: str, value: Any, source: str, where: str) -> Any:
    if key == "launcher":
        return _choice(value, source, where, "launcher", LAUNCHER_ALIASES, LAUNCHERS)
    if key == "nnodes":
        return _count(value, source, where, key, 1, MAX_NODES)
    if key == "nproc_per_node":
        return _ranks(value, source, where)
    if key == "cpu_nproc_per_node":
        return _count(value, source, where, key, 1, MAX_PROCS_PER_NODE)
    if key.endswith("_parallel_size"):
        return _count(value, source, where, key, 1, MAX_PARALLEL_SIZE)
    if key == "backend":
        name = _choice(value, source, where, "backend", BACKEND_ALIASES, (*BACKENDS, AUTO))
        return None if name == AUTO else name
    if key in ("master_port", "port"):
        port = port_number(value)
        if port is None:
            raise _error(f"must be a TCP port from 1 to 65535, got {brief(value)}", source, where, key)
        return port
    return _section(key, value, source, where)


def check_block(value: Any, *, source: str, where: str = "distributed") -> dict[str, Any]:
    """One ``distributed`` block as written, checked key by key and normalised (canonical launcher
    and backend names, whole numbers, ``port`` read as ``master_port``); a key set to ``null`` (or
    ``nproc_per_node``/``backend`` set to ``"auto"``) is ``None``, so a context can clear a model's
    value back to the default. Raises
    :class:`LaunchError` (exit 2)."""
    if not isinstance(value, Mapping):
        raise LaunchError(f"must be an object, got {brief(value)}", path=source, field=where,
                          hint='e.g. {"launcher": "torchrun", "nproc_per_node": 2}')
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key not in KNOWN_KEYS:
            raise _error(f"unknown key {brief(key)}", source, where, str(key), hint="known keys: "
                         + ", ".join(k for k in KNOWN_KEYS if k != "port"))
        out[key] = None if item is None else _value(key, item, source, where)
    if "port" in out:
        port = out.pop("port")
        if out.get("master_port") is None:
            out["master_port"] = port
        elif port is not None and port != out["master_port"]:
            raise _error(f"port {port} and master_port {out['master_port']} differ", source, where, "port",
                         hint="give master_port only")
    return out


def merge_blocks(model_block: Mapping[str, Any] | None, context_block: Mapping[str, Any] | None) -> dict[str, Any]:
    """The context's block over the model's, key by key (a launcher's section too); both checked."""
    merged: dict[str, Any] = {key: dict(value) if isinstance(value, Mapping) else value
                              for key, value in (model_block or {}).items()}
    for key, value in (context_block or {}).items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key].update(value)
        else:
            merged[key] = dict(value) if isinstance(value, Mapping) else value
    return merged


# -- the whole block -----------------------------------------------------------------------------
def _given(value: Any) -> bool:
    """A key that says something: not null, and a section with at least one value that is not."""
    return value is not None and (not isinstance(value, Mapping) or any(v is not None for v in value.values()))


def _check_keys_apply(block: Mapping[str, Any], launcher: str, source: str, where: str) -> None:
    for key, launchers in KEY_LAUNCHERS.items():
        if _given(block.get(key)) and launcher not in launchers:
            raise _error(f"does not apply to the {launcher} launcher", source, where, key,
                         hint=f"it applies to {', '.join(launchers)}; drop it or change the launcher")


def _disagg_split(block: Mapping[str, Any], nnodes: int, source: str, where: str) -> tuple[int, int]:
    """(prefill nodes, decode nodes) of an SGLang disaggregated job: node 0 is the proxy; by
    default about 40 % of the others prefill and the rest decode."""
    if nnodes < 3:
        raise _error(f"sglang-disagg needs 3 or more nodes (a proxy, a prefill and a decode node), got {nnodes}",
                     source, where, "nnodes", hint="set nnodes to 3 or more")
    section = block.get("sglang_disagg") or {}
    workers = nnodes - 1
    prefill, decode = section.get("prefill_nodes"), section.get("decode_nodes")
    if prefill is None and decode is None:
        prefill = max(1, workers * 2 // 5)
    prefill = workers - decode if prefill is None else prefill
    decode = workers - prefill if decode is None else decode
    if prefill < 1 or decode < 1 or prefill + decode != workers:
        raise _error(f"prefill_nodes + decode_nodes must be {workers} (nnodes {nnodes} less the proxy), each 1 or "
                     f"more; got {section.get('prefill_nodes')} + {section.get('decode_nodes')}", source, where,
                     "sglang_disagg")
    return prefill, decode


def primus_backend_of(model_name: str) -> str:
    """Primus's BACKEND as a model's name says it (:data:`PRIMUS_BACKENDS`); '' when it says none.
    The longest launcher word wins: ``megatron_bridge_...`` is megatron_bridge, not megatron."""
    if not model_name.startswith(PRIMUS_NAME_PREFIX):
        return ""
    rest = model_name[len(PRIMUS_NAME_PREFIX):].lower()
    for word in sorted(PRIMUS_BACKENDS, key=len, reverse=True):
        if rest == word or rest.startswith(word + "_"):
            return PRIMUS_BACKENDS[word]
    return ""


def spec_from_block(block: Mapping[str, Any], *, source: str, where: str = "distributed",
                    model_name: str = "") -> DistributedSpec:
    """The :class:`DistributedSpec` of a checked (and merged) block; Primus's backend, when the
    block names none, from ``model_name`` (:func:`primus_backend_of`). Raises :class:`LaunchError`."""
    launcher = block.get("launcher") or DEFAULT_LAUNCHER
    _check_keys_apply(block, launcher, source, where)
    nnodes = block.get("nnodes") or 1
    prefill = decode = None
    if launcher == "sglang-disagg":
        prefill, decode = _disagg_split(block, nnodes, source, where)
    primus = block.get("primus") or {}
    deepspeed = block.get("deepspeed") or {}
    return DistributedSpec(
        launcher=launcher, nnodes=nnodes, nproc_per_node=block.get("nproc_per_node"),
        cpu_nproc_per_node=block.get("cpu_nproc_per_node"), backend=block.get("backend"),
        master_port=block.get("master_port"), tensor_parallel_size=block.get("tensor_parallel_size"),
        pipeline_parallel_size=block.get("pipeline_parallel_size"),
        context_parallel_size=block.get("context_parallel_size"),
        hostfile=deepspeed.get("hostfile") or "", prefill_nodes=prefill, decode_nodes=decode,
        primus_config_path=primus.get("config_path") or "", primus_cli_extra=primus.get("cli_extra") or "",
        primus_backend=primus.get("backend") or (primus_backend_of(model_name) if launcher == "primus" else ""))


def parse_distributed(value: Any, *, source: str, where: str = "distributed", model_name: str = "") -> DistributedSpec:
    """One block as written → its spec (:func:`check_block` then :func:`spec_from_block`)."""
    return spec_from_block(check_block(value, source=source, where=where), source=source, where=where,
                           model_name=model_name)
