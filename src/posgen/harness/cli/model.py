"""``posgen model``: prepare the embedded model and print the folder to pass as ``pretrained=``."""

from __future__ import annotations

import argparse


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", nargs="?", default="embedded", help="embedded model alias (embedded, smollm2-135m)"
    )


def main(args: argparse.Namespace) -> int:
    from posgen.harness.embedded import embedded_model_path, is_embedded_alias

    if not is_embedded_alias(args.name):
        raise SystemExit(
            f"posgen model: {args.name!r} is not an embedded model alias; "
            "known: embedded, smollm2-135m"
        )
    print(embedded_model_path())
    return 0
