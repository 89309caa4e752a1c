"""``voice-agent bench NAME``: finds the benchmark module, builds its parser, runs it.

Each benchmark is imported only when it runs (they pull in the replay client
and matplotlib); the list of them reads each module's docstring from its
source, so ``voice-agent bench -h`` imports none.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import shlex
import sys

# Every benchmark ``voice-agent bench`` offers, in the order its help lists them.
BENCHMARKS = ("latency", "load", "endpointing", "bargein", "answers", "conversations")
EXIT_ERROR = 2


def module_name(name: str) -> str:
    return f"{__package__}.{name}"


def summary(name: str) -> str | None:
    """The first line of the benchmark's module docstring, or None when the module is not there."""
    spec = importlib.util.find_spec(module_name(name))
    if spec is None or spec.origin is None:
        return None
    with open(spec.origin, encoding="utf-8") as source:
        docstring = ast.get_docstring(ast.parse(source.read())) or ""
    return docstring.split("\n", 1)[0]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    lines = [f"  {name:<12} {summary(name) or '(not in this version)'}" for name in BENCHMARKS]
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = "Run a benchmark or eval against a local server it starts.\n\nbenchmarks:\n" + "\n".join(lines)
    parser.epilog = "voice-agent bench NAME -h shows a benchmark's options."
    parser.add_argument("benchmark", metavar="NAME", choices=BENCHMARKS, help="one of: " + ", ".join(BENCHMARKS))
    parser.add_argument(
        "arguments",
        nargs=argparse.REMAINDER,
        help="the benchmark's options; after --, options for `voice-agent serve`",
    )


def main(args: argparse.Namespace) -> int:
    return run(args.benchmark, args.arguments)


def run(name: str, arguments: list[str]) -> int:
    """Parse ``arguments`` with benchmark NAME's parser and run it; its exit status."""
    prog = f"voice-agent bench {name}"
    if summary(name) is None:
        print(f"{prog}: this benchmark is not in this version ({module_name(name)} is missing)", file=sys.stderr)
        return EXIT_ERROR
    module = importlib.import_module(module_name(name))
    parser = argparse.ArgumentParser(
        prog=prog,
        description=module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"Arguments after -- go to `voice-agent serve`, e.g. {prog} -- --llm-max-tokens 60",
    )
    module.add_arguments(parser)
    ours, serve_args = split_serve_arguments(arguments)
    args, unknown = parser.parse_known_args(ours)
    # Options the benchmark does not know are for the server, as are those after --.
    args.serve_args = unknown + serve_args
    args.command_line = shlex.join(["voice-agent", "bench", name, *arguments])
    return module.run(args)


def split_serve_arguments(arguments: list[str]) -> tuple[list[str], list[str]]:
    """(the benchmark's arguments, the server's): the server's are everything after the first ``--``."""
    if "--" not in arguments:
        return list(arguments), []
    at = arguments.index("--")
    return list(arguments[:at]), list(arguments[at + 1 :])
