"""The ``posgen`` command line.

Each subcommand lives in its own module, which exposes ``configure_parser(parser)`` and
``main(args) -> int``. Only the chosen subcommand's module is imported; it keeps its
top-level imports light (no torch, transformers, lm-eval or scipy: the library modules it
calls are imported inside ``main``), so ``--help`` and argument errors are instant and bad
input is refused before any model loads.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from posgen import __version__

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("posgen.harness.cli.run", "perturbation sweep + decomposition + scoring + report"),
    "decompose": ("posgen.harness.cli.decompose", "fit W[i,j] ≈ a[i-j] + b[i] + c[j] per head"),
    "report": ("posgen.harness.cli.report", "re-make the report of any posgen folder(s)"),
    "ingest": ("posgen.harness.cli.ingest", "a run folder from lm-eval output (--log_samples)"),
    "compare": ("posgen.harness.cli.compare", "print the differences between two runs"),
    "baseline": ("posgen.harness.cli.baseline", "store a run's tolerance figures as a baseline"),
    "check": (
        "posgen.harness.cli.check",
        "CI gate: exit 1 on a real drop against a baseline (3: could not tell, --require-power)",
    ),
    "tasks": ("posgen.harness.cli.tasks", "list or write perturbed lm-eval task configs"),
    "model": ("posgen.harness.cli.model", "prepare the embedded model and print its path"),
    "length": ("posgen.harness.cli.length", "NLL by position past the trained context"),
    "layers": ("posgen.harness.cli.layers", "which layers carry position: per-layer sensitivity"),
    "cause": (
        "posgen.harness.cli.cause",
        "does the additive form of the logits explain tolerance?",
    ),
}


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (its first word that is not an option), if any."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported and its options configured (the
    others are listed by name and help), so ``--help`` and argument errors stay instant."""
    parser = argparse.ArgumentParser(
        prog="posgen",
        description="Measure how well a language model tolerates perturbed positions, "
        "and explain why.",
    )
    parser.add_argument("--version", action="version", version=f"posgen {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            importlib.import_module(module_name).configure_parser(p)
        p.set_defaults(_module=module_name)
    return parser


def log_notes_to_stderr() -> None:
    """Show the library's notes (the ``posgen`` logger, INFO and up) on stderr as
    ``posgen: <note>``; once per process."""
    logger = logging.getLogger("posgen")
    if not any(getattr(h, "_posgen_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("posgen: %(message)s"))
        handler._posgen_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(chosen_command(argv)).parse_args(argv)
    log_notes_to_stderr()
    module = importlib.import_module(args._module)
    return int(module.main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
