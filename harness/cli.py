"""`rollcheck ...`: one subcommand per module, each registering its own options."""

from __future__ import annotations

import argparse
import sys


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit 2."""


def _sim(sub: argparse._SubParsersAction) -> None:
    from harness.sim import settings

    p = sub.add_parser("sim", help="run the vLLM-compatible engine simulator")
    settings.add_arguments(p)

    def run(ns: argparse.Namespace) -> int:
        from harness.sim.server import run as run_sim

        s = settings.from_namespace(ns)
        try:
            s.validate()
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return run_sim(s)

    p.set_defaults(func=run)


COMMANDS = [_sim]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rollcheck", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for register in COMMANDS:
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        return ns.func(ns)
    except UsageError as exc:
        print(f"rollcheck {ns.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
