"""madengine k8s: Kubernetes objects for review and GitOps, without a cluster.

``render`` writes the objects of each selected model's job (as ``run --executor k8s`` would send
them) into a folder; ``rbac`` prints the Role and RoleBinding a namespace needs for madengine.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from madengine.cli.commands import SUMMARIES
from madengine.cli.commands.discover import add_tags_argument
from madengine.cli.commands.run import _timeout, add_context_arguments
from madengine.cli.env import CliReporter, Environment
from madengine.core.errors import ExitStatus


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("k8s", help=SUMMARIES["k8s"],
                                   description="Kubernetes objects without a cluster: 'render' writes each selected "
                                               "model's job as YAML (the 'k8s' block of the context says how), "
                                               "'rbac' prints the Role a namespace grants madengine.")
    commands = parser.add_subparsers(dest="k8s_command", metavar="{render,rbac}", required=True)
    render = commands.add_parser("render", help="write each selected model's Kubernetes objects as YAML files",
                                 description="Write the ConfigMap, Service and Job (and with --include-secrets the "
                                             "Secrets) of each selected model's job under --output-dir/<job>/, as "
                                             "'madengine run --executor k8s' would create them.")
    add_tags_argument(render)
    add_context_arguments(render)
    render.add_argument("--manifest-file", "-m", default=None, metavar="JSON",
                        help="render the images of a build manifest (pushed with 'madengine build --registry')")
    render.add_argument("--registry", default=None, metavar="HOST[/NS]",
                        help="pull the manifest's images through this registry address instead")
    render.add_argument("--output-dir", "-o", default="k8s-manifests", metavar="DIR",
                        help="folder to write into (default: k8s-manifests)")
    render.add_argument("--timeout", type=_timeout, default=-1, metavar="SECONDS",
                        help="the jobs' deadline: -1 = each model's 'timeout' or 7200 s (default), 0 = none")
    render.add_argument("--include-secrets", action="store_true",
                        help="also write the Secrets (credentials; files of mode 0600): never commit them")
    render.add_argument("--json", action="store_true", help="print the written files as JSON on stdout")
    render.set_defaults(handler=handle_render)
    rbac = commands.add_parser("rbac", help="print the Role and RoleBinding madengine needs in a namespace",
                               description="Print the RBAC objects a namespace needs for 'madengine run --executor "
                                           "k8s': a Role (ConfigMaps, Secrets, Services, Jobs, pods and their logs) "
                                           "and its RoleBinding, with the ServiceAccount they bind.")
    rbac.add_argument("--namespace", "-n", default="default", help="the namespace the jobs run in")
    rbac.add_argument("--subject", default="madengine", help="who runs madengine (default: ServiceAccount madengine)")
    rbac.add_argument("--subject-kind", default="ServiceAccount", choices=("ServiceAccount", "User", "Group"))
    rbac.add_argument("--name", default="madengine", help="the Role's and RoleBinding's name")
    rbac.add_argument("--node-read", action="store_true",
                      help="also a ClusterRole to list nodes (lets a run refuse a GPU count no node can give)")
    rbac.add_argument("--output", default=None, metavar="FILE", help="write to FILE instead of stdout")
    rbac.set_defaults(handler=handle_rbac)


def handle_render(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.distributed import TransportOptions
    from madengine.execution import RunOptions
    from madengine.pipeline import RunRequest
    from madengine.pipeline.kubernetes import render_k8s

    timeout = args.timeout
    request = RunRequest(run=RunOptions(tags=tuple(args.tags), context_file=args.additional_context_file,
                                        context_string=args.additional_context, executor="k8s",
                                        timeout=None if timeout == -1 else timeout),
                         transport=TransportOptions(manifest_file=args.manifest_file, registry=args.registry))
    written = render_k8s(request, env.host(), CliReporter(env), Path(args.output_dir),
                         include_secrets=args.include_secrets)
    if args.json:
        env.data(json.dumps([str(path) for path in written], indent=1))
    else:
        env.data("\n".join(str(path) for path in written))
    env.message(f"madengine: {len(written)} file(s) under {args.output_dir}; apply with: kubectl apply -R -f "
                f"{args.output_dir}")
    return ExitStatus.OK


def handle_rbac(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.k8s.rbac import rbac_objects
    from madengine.k8s.yamlio import dump_all

    text = dump_all(rbac_objects(args.namespace, args.subject, kind=args.subject_kind, name=args.name,
                                 node_read=args.node_read))
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        env.message(f"madengine: RBAC for namespace {args.namespace} written to {args.output}; apply with: "
                    f"kubectl apply -f {args.output}")
    else:
        env.data(text.rstrip("\n"))
    return ExitStatus.OK
