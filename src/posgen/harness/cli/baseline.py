"""``posgen baseline RUN -o FILE``: store a model's per-document degradations and
unperturbed values, and with ``posgen run --length`` its per-document NLL excess past C
(see :mod:`posgen.results.gate.check`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from posgen.results.gate.baseline_file import GateInputError


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, help="run folder written by `posgen run`")
    parser.add_argument("-o", "--output", type=Path, required=True, help="baseline JSON to write")
    parser.add_argument(
        "--model", help="model label in the run (default: its only non-random-init model)"
    )


def main(args: argparse.Namespace) -> int:
    from posgen.results.folder.folder_kind import require_folder
    from posgen.results.folder.schema import SchemaError
    from posgen.results.folder.store import atomic_write_json
    from posgen.results.gate.check import baseline_payload

    try:
        require_folder(args.run, "run", "posgen baseline")
        payload = baseline_payload(args.run, args.model)
        atomic_write_json(args.output, payload)
    except (GateInputError, SchemaError, OSError) as e:
        print(f"posgen baseline: {e}", file=sys.stderr)
        return 2
    length = payload["length"]
    extra = f" and {len(length['cells'])} length cells" if length else ""
    print(
        f"posgen baseline: {len(payload['cells'])} perturbed cells, "
        f"{len(payload['base'])} unperturbed{extra} of {payload['model']} "
        f"written to {args.output}"
    )
    for n in payload["not_gated"]:
        print(f"posgen baseline: not gated: {n['task']} / {n['metric']}: {n['reason']}")
    return 0
