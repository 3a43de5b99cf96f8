"""Translate a model's ``additional_docker_run_options`` (docker CLI syntax) into the fields of the
Engine API's container configuration. Only options with a known, explicit meaning are accepted: an
unknown option is an error naming it, never passed through a shell.

:func:`parse_run_options` reads the text into named values (``shm_size``, ``cap_add``, ...);
:func:`engine_fields` places them in the create call's body (``HostConfig`` or the top level).
"""

from __future__ import annotations

import shlex
from typing import Any

from madengine.core.errors import ExecutionError

_LIST_OPTIONS = {"--cap-add": "cap_add", "--cap-drop": "cap_drop", "--security-opt": "security_opt",
                 "--device": "devices", "--group-add": "group_add", "--dns": "dns", "--tmpfs": "tmpfs"}
_VALUE_OPTIONS = {"--shm-size": "shm_size", "--ipc": "ipc_mode", "--network": "network_mode",
                  "--net": "network_mode", "--user": "user", "-u": "user", "--cpuset-cpus": "cpuset_cpus",
                  "--memory": "mem_limit", "-m": "mem_limit", "--memory-swap": "memswap_limit", "--pids-limit": "pids_limit",
                  "--hostname": "hostname", "-h": "hostname", "--pid": "pid_mode", "--cpus": "nano_cpus",
                  "--userns": "userns_mode", "--runtime": "runtime"}
_FLAG_OPTIONS = {"--privileged": "privileged", "--init": "init", "--read-only": "read_only"}


_OTHER_OPTIONS = ("-e", "--env", "-v", "--volume", "--ulimit", "--gpus")
#: parsed names of the options that are not in the tables above
_OTHER_NAMES = {"environment": "--env", "volumes": "--volume", "ulimits": "--ulimit", "gpus": "--gpus"}


def option_name(key: str) -> str:
    """The docker flag (its long form) a value of :func:`parse_run_options` came from."""
    for table in (_LIST_OPTIONS, _VALUE_OPTIONS, _FLAG_OPTIONS):
        flag = next((flag for flag, name in table.items() if name == key and flag.startswith("--")), None)
        if flag is not None:
            return flag
    return _OTHER_NAMES.get(key, key)


def parse_run_options(text: str) -> dict[str, Any]:
    """``'--shm-size 8G --cap-add SYS_PTRACE -e A=1'`` → ``{'shm_size': '8G', 'cap_add': [...], ...}``."""
    try:
        tokens = shlex.split(text or "")
    except ValueError as exc:
        raise ExecutionError(f"additional_docker_run_options cannot be parsed ({exc})") from None
    out: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        name, sep, inline = tokens[i].partition("=") if tokens[i].startswith("--") else (tokens[i], "", "")
        if name in _FLAG_OPTIONS:
            out[_FLAG_OPTIONS[name]] = True
        elif name in _LIST_OPTIONS or name in _VALUE_OPTIONS or name in _OTHER_OPTIONS:
            if not sep:  # the value is the next word
                i += 1
                if i >= len(tokens):
                    raise ExecutionError(f"additional_docker_run_options: {name} needs a value")
            _take(out, name, inline if sep else tokens[i])
        else:
            raise ExecutionError(f"additional_docker_run_options: unsupported option '{name}'",
                                 hint="supported: " + ", ".join(sorted({*_LIST_OPTIONS, *_VALUE_OPTIONS, *_FLAG_OPTIONS,
                                                                        *_OTHER_OPTIONS} - {"--env", "--volume"})))
        i += 1
    return out


def _take(out: dict[str, Any], name: str, item: str) -> None:
    """Option ``name`` with its value ``item`` into the parsed values."""
    if name in _LIST_OPTIONS:
        key = _LIST_OPTIONS[name]
        if key == "tmpfs":
            path, _, opts = item.partition(":")
            out.setdefault("tmpfs", {})[path] = opts
        else:
            out.setdefault(key, []).append(item)
    elif name in _VALUE_OPTIONS:
        out[_VALUE_OPTIONS[name]] = _value(name, _VALUE_OPTIONS[name], item)
    elif name in ("-e", "--env"):
        key, _, val = item.partition("=")
        out.setdefault("environment", {})[key] = val
    elif name in ("-v", "--volume"):
        spec = item.split(":")
        if len(spec) < 2:
            raise ExecutionError(f"additional_docker_run_options: volume '{item}' needs host:container")
        out.setdefault("volumes", {})[spec[0]] = {"bind": spec[1], "mode": spec[2] if len(spec) > 2 else "rw"}
    elif name == "--ulimit":
        uname, _, limits = item.partition("=")
        soft, _, hard = limits.partition(":")
        what = "<name>=<soft>[:<hard>] with whole numbers, e.g. nofile=1024:4096"
        out.setdefault("ulimits", []).append((uname, _number(name, soft, int, what),
                                              _number(name, hard or soft, int, what)))
    else:  # --gpus
        out["gpus"] = item


def _value(name: str, key: str, item: str) -> Any:
    if key == "nano_cpus":
        return int(_number(name, item, float, "a number of CPUs, e.g. 2 or 1.5") * 1e9)
    if key == "pids_limit":
        return _number(name, item, int, "a whole number of processes, or -1 for no limit")
    if key in _BYTE_VALUES:
        return _bytes(name, item)
    return item


_BYTE_VALUES = ("shm_size", "mem_limit", "memswap_limit")
_UNITS = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}

#: parsed name → its field in the body's HostConfig (or, below, at the body's top level)
_HOST_FIELDS = {"cap_add": "CapAdd", "cap_drop": "CapDrop", "security_opt": "SecurityOpt", "group_add": "GroupAdd",
                "dns": "Dns", "tmpfs": "Tmpfs", "shm_size": "ShmSize", "ipc_mode": "IpcMode",
                "network_mode": "NetworkMode", "cpuset_cpus": "CpusetCpus", "mem_limit": "Memory",
                "memswap_limit": "MemorySwap", "pids_limit": "PidsLimit", "pid_mode": "PidMode",
                "nano_cpus": "NanoCpus", "userns_mode": "UsernsMode", "runtime": "Runtime",
                "privileged": "Privileged", "init": "Init", "read_only": "ReadonlyRootfs"}
_TOP_FIELDS = {"user": "User", "hostname": "Hostname"}


def engine_fields(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parsed options (volumes, environment and gpus already taken out) as the body's top-level
    fields and its ``HostConfig`` fields."""
    top: dict[str, Any] = {}
    host: dict[str, Any] = {}
    for key, value in options.items():
        if key in _TOP_FIELDS:
            top[_TOP_FIELDS[key]] = value
        elif key == "devices":
            host["Devices"] = [device_mapping(item) for item in value]
        elif key == "ulimits":
            host["Ulimits"] = [{"Name": n, "Soft": soft, "Hard": hard} for n, soft, hard in value]
        else:
            host[_HOST_FIELDS[key]] = value
    return top, host


def device_mapping(text: str) -> dict[str, str]:
    """``/dev/x[:/dev/y[:rwm]]`` as the engine's device mapping."""
    parts = text.split(":")
    host_path = parts[0]
    container_path = parts[1] if len(parts) > 1 and parts[1] else host_path
    permissions = parts[2] if len(parts) > 2 and parts[2] else "rwm"
    return {"PathOnHost": host_path, "PathInContainer": container_path, "CgroupPermissions": permissions}


def _bytes(option: str, text: str) -> int:
    """``8G``, ``512m``, ``1gb``, ``1048576`` or ``-1`` as bytes (units of 1024, as docker reads them)."""
    value = text.strip().lower()
    if value.endswith("b") and len(value) > 1 and value[-2] in "kmg":
        value = value[:-1]
    scale = _UNITS.get(value[-1:], 0) if value[-1:].isalpha() else 1
    digits = value[:-1] if value[-1:].isalpha() else value
    try:
        number = float(digits) if scale else None
    except ValueError:
        number = None
    if number is None or not (number > 0 or number == -1):
        raise ExecutionError(f"additional_docker_run_options: {option} {text!r} is not valid",
                             hint="write a size such as 8G, 512m or 1048576 (bytes)")
    return int(number * scale)


def _number(option: str, text: str, kind: type, what: str):
    """``text`` as an int or a finite positive-or-limit float, else an error naming the option."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or (kind is float and not (0 < value < 1e6)):
        raise ExecutionError(f"additional_docker_run_options: {option} {text!r} is not valid", hint=f"write {what}")
    return value
