"""The `cachescout` command: one subcommand per job, each owned by the module that does it.

Subcommand modules are imported lazily so `cachescout --help` stays fast and a broken optional
module cannot take the proxy down. Each module exposes `add_arguments(parser)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("proxy.http.serve", "run the proxy in front of an OpenAI-compatible engine"),
    "sim-engine": ("proxy.simengine.server_cli", "run the simulated engine (OpenAI-compatible, prefix cache model)"),
    "demo": ("proxy.demo.cli", "simulated engine + proxy + multi-agent workload, direct vs proxied"),
    "replay": ("proxy.replay.cli", "replay a workload or trace under several policies in virtual time"),
    "bench": ("proxy.bench.cli", "live benchmarks over sockets (claude-code: real agent sessions, direct vs proxy)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cachescout", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_text)
        sp.set_defaults(_module=module_name)
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # keep the other subcommands usable
            sp.set_defaults(_import_error=str(exc))
            continue
        module.add_arguments(sp)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_import_error", None):
        print(f"cachescout {args.command}: unavailable: {args._import_error}", file=sys.stderr)
        return 2
    module = importlib.import_module(args._module)
    return int(module.run(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
