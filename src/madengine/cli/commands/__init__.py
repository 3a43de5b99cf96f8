"""One module per subcommand: ``add_parser(subparsers)`` and ``handle(args, env)``."""
