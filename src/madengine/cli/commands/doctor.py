"""madengine doctor: whether this host can run the selected models, and what to fix."""

from __future__ import annotations

import argparse

from madengine.cli.commands import SUMMARIES
from madengine.cli.commands.discover import add_tags_argument
from madengine.cli.commands.run import add_context_arguments
from madengine.cli.env import Environment
from madengine.core.errors import ExitStatus


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds") from None
    if not 1 <= value <= 3600:
        raise argparse.ArgumentTypeError("must be 1 to 3600 seconds")
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "doctor", help=SUMMARIES["doctor"],
        description="Check this host the way a run uses it: Python and madengine, the Docker engine, the GPUs "
                    "as runs detect them, their driver, device nodes and container runtime, PyTorch and a "
                    "collective (NCCL/RCCL on GPUs, gloo on the CPU), Slurm and Kubernetes when named, and each "
                    "model --tags selects. One line per check (PASS, WARN, FAIL, or SKIP where it does not apply) "
                    "with the fix. Exit 0 when the host can run them, 1 when a check fails, 2 for bad input.")
    add_tags_argument(parser)
    parser.add_argument("--executor", choices=("auto", "docker", "local", "slurm", "k8s"), default="auto",
                        help="the executor the models would run on (default auto: docker when an engine answers)")
    add_context_arguments(parser)
    parser.add_argument("--no-collective", action="store_true", help="skip the collective test (it takes seconds)")
    parser.add_argument("--collective-timeout", type=_seconds, default=180.0, metavar="SECONDS",
                        help="limit for the collective test's processes, all together (default 180)")
    parser.add_argument("--json", action="store_true", help="print the checks and the verdict as JSON on stdout")
    parser.set_defaults(handler=handle)


def render(check) -> str:
    """``FAIL  devices     /dev/kfd missing ... (fix: load the driver ...)``"""
    line = f"{check.status:<4}  {check.name:<11} {check.summary}"
    return f"{line} (fix: {check.fix})" if check.fix and check.status != "PASS" else line


def handle(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.core import jsonio
    from madengine.doctor import DoctorRequest, prepare

    request = DoctorRequest(tags=tuple(args.tags), executor=args.executor,
                            context_file=args.additional_context_file, context_string=args.additional_context,
                            collective=not args.no_collective, collective_timeout=args.collective_timeout)
    diagnosis = prepare(request, env.host())
    for check in diagnosis.checks():
        if not args.json:
            env.data(render(check))
    if args.json:
        env.data(jsonio.dumps(diagnosis.to_dict(), indent=True))
    env.message(f"madengine doctor: {diagnosis.verdict()}")
    return ExitStatus(diagnosis.exit_code())
