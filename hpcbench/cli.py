"""Command line: parsing and dispatch only. Each command is a module of ``hpcbench.commands`` (its
flags in ``add``, what it does in ``run``); heavy imports happen inside the commands that need them."""
from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence

from hpcbench import __version__
from hpcbench.commands import COMMANDS
from hpcbench.errors import Escaping, NoLauncher, RuntimeFailure, SignalStop, UsageError, one_line
from hpcbench.launch.arguments import Parser
from hpcbench.launch.local import env_rank, leave_launch_together


def build_parser() -> Parser:
    parser = Parser(prog="hpcbench", description="Benchmark distributed SGD algorithms under MPI.")
    parser.add_argument("--version", action="version", version=f"hpcbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; everything it prints is escaped (``errors.Escaping``) while it runs."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Escaping(sys.stdout), Escaping(sys.stderr)  # type: ignore[assignment]
    try:
        return dispatch(parse(build_parser(), argv), list(sys.argv[1:] if argv is None else argv))
    finally:
        sys.stdout, sys.stderr = streams


def parse(parser: Parser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, with arguments no flag takes refused by the command's own parser, so that the
    line points at its help (``hpcbench report --help``), and ``--set KEY VALUE`` answered with the
    ``--set KEY=VALUE`` it most likely meant."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        tokens = list(sys.argv[1:] if argv is None else argv)
        hint = next((f"; did you mean --set {key}={value}?" for flag, key, value in zip(tokens, tokens[1:], tokens[2:])
                     if flag == "--set" and "=" not in key and value in extra), "")
        command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    return args


def command_parser(parser: Parser, command: str) -> argparse.ArgumentParser:
    """The parser of the subcommand ``command`` (``parser`` itself where there is none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return parser


def dispatch(args: argparse.Namespace, argv: Sequence[str] = ()) -> int:
    """Run the parsed command (``argv``: its command line, which a refusal may repeat)."""
    handler: Callable[[argparse.Namespace], int] = args.func
    try:
        return handler(args)
    except UsageError as exc:
        text = exc.text(argv) if isinstance(exc, NoLauncher) and argv[:1] == ["run"] else str(exc)
        if env_rank() == 0:
            print(f"hpcbench: error: {one_line(text)}", file=sys.stderr, flush=True)
        leave_launch_together()
        return 2
    except RuntimeFailure as exc:  # what a run that failed did not say itself (a simulation's)
        if env_rank() == 0:
            print(f"hpcbench: error: {one_line(str(exc))}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt as stop:  # Ctrl-C, a hangup or SIGTERM in a study: the run under way kept its record
        name = stop.name if isinstance(stop, SignalStop) else "Ctrl-C"
        if env_rank() == 0:
            again = {"sweep": "sweep --local ... --resume runs what is left", "demo": "the demo starts over when run "
                     "again", "tune": "tune run again keeps the finished runs", "reproduce": "reproduce run again "
                     "keeps the finished runs"}.get(args.command, "the run under way kept its record (aborted)")
            print(f"hpcbench: stopped by {name} during {args.command}; {again}", file=sys.stderr)
        return 128 + (signal.Signals[stop.name] if isinstance(stop, SignalStop) else signal.SIGINT)
    except BrokenPipeError:  # the reader has gone (``| head``): end quietly, as a tool killed by SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush has nowhere to fail
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    raise SystemExit(main())
