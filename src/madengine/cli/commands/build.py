"""madengine build: build the selected models' images once and write a build manifest that
``madengine run --manifest-file`` runs without rebuilding."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from madengine.cli.commands.discover import add_tags_argument
from madengine.cli.commands.run import add_context_arguments, add_image_arguments
from madengine.cli.env import Environment
from madengine.core.errors import CredentialError, ExitStatus, InputError
from madengine.cli.commands import SUMMARIES


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "build", help=SUMMARIES["build"],
        description="Build each selected model's images and write an immutable build manifest (image ids, "
                    "Dockerfiles, build args, context, model entries; failed builds with their reasons). With "
                    "--registry the images are pushed, with --image-archive saved as 'docker save' archives, so "
                    "that other hosts can run them. Exit 1 when any build failed.")
    add_tags_argument(parser)
    parser.add_argument("--manifest-file", "--manifest-output", "-m", default="build_manifest.json", metavar="JSON",
                        help="manifest to write (default: build_manifest.json)")
    parser.add_argument("--registry", default=None, metavar="HOST[:PORT][/NS]",
                        help="push the images to this registry (credentials: MADENGINE_REGISTRY_USER and "
                             "MADENGINE_REGISTRY_PASSWORD or --password-stdin, else docker's own login)")
    parser.add_argument("--password-stdin", action="store_true",
                        help="read the registry password from the first line of stdin")
    parser.add_argument("--image-archive", default=None, metavar="DIR",
                        help="save each image as a 'docker save' archive in DIR (a folder the run hosts share)")
    add_image_arguments(parser)
    add_context_arguments(parser)
    parser.add_argument("--live-output", "-l", action="store_true", help="stream build output to stderr")
    parser.add_argument("--runs-dir", default="madengine_runs", metavar="DIR",
                        help="folder for the build logs (default: madengine_runs)")
    parser.add_argument("--json", action="store_true", help="print the manifest as JSON on stdout")
    parser.set_defaults(handler=handle)


def _password(args: argparse.Namespace, env: Environment) -> str | None:
    if not args.password_stdin:
        return None
    if not args.registry:
        raise InputError("--password-stdin needs --registry", path="--password-stdin")
    line = env.stdin.readline().rstrip("\r\n")
    if not line:
        raise CredentialError("no password on stdin", path="--password-stdin")
    return line


def handle(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from madengine.cli.env import CliReporter
    from madengine.cli.render import table
    from madengine.distributed import TransportOptions
    from madengine.core.flagtable import option_values
    from madengine.execution.options import IMAGE_FLAGS, BuildOptions
    from madengine.pipeline import BuildRequest, build

    request = BuildRequest(
        tags=tuple(args.tags), context_file=args.additional_context_file, context_string=args.additional_context,
        runs_dir=Path(args.runs_dir), manifest_file=args.manifest_file,
        build=BuildOptions(live_output=args.live_output, **option_values(IMAGE_FLAGS, args)),
        transport=TransportOptions(registry=args.registry, image_archive=args.image_archive,
                                   password=_password(args, env)))
    manifest = build(request, env.host(), CliReporter(env))
    rows = [(i.model, i.image, "built", i.image_id[7:19], i.registry_image or i.archive or "") for i in manifest.images]
    rows += [(f.model, f.image, "FAILED", "", f.reason) for f in manifest.failed]
    print(table(("model", "image", "status", "image id", "registry image / archive / reason"), rows, max_width=80),
          file=env.stderr, flush=True)
    if args.json:
        env.data(json.dumps(manifest.to_json(), indent=1))
    env.message(f"madengine: {len(manifest.images)} image(s) built, {len(manifest.failed)} failed; "
                f"manifest {manifest.path}")
    return ExitStatus.FAILED if manifest.failed else ExitStatus.OK
