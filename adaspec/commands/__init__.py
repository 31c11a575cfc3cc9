"""The bodies of the `adaspec` subcommands (the parser and error handling live in adaspec/cli.py)."""
