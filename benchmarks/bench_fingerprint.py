"""What a local model's identity by content costs (posgen.harness.loading.identity).

Writes a synthetic model folder (config.json and a ``model.safetensors`` of ``--gb`` GB of
random bytes) into a temporary folder, then times, side by side in one run: the content
revision cold (no cached digest: the weights are read and hashed once, as on the first
run of a command on a new checkpoint), the same revision again (cached: a ``stat`` per
file), one sequential SHA-256 of the same bytes (what a plain hash would cost), and the
revision of earlier releases (names and sizes only). The weights are in the page cache
after they are written, so the cold line is the hashing's cost, not the disk's; a
checkpoint on a disk slower than that is read at the disk's speed, which the model's
load then pays less for.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from unittest import mock

from posgen.harness.loading import identity


def write_model(folder: Path, gb: float) -> int:
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    size, block = int(gb * 1e9), os.urandom(64 << 20)
    with open(folder / "model.safetensors", "wb") as f:
        for offset in range(0, size, len(block)):
            f.write(block[: min(len(block), size - offset)])
    return size


def timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.5, help="size of the synthetic weights")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="posgen-bench-fingerprint-") as tmp:
        folder, cache = Path(tmp) / "model", Path(tmp) / "cache" / identity.CACHE_FILE
        folder.mkdir()
        size = write_model(folder, args.gb)
        time.sleep(identity.RACY_SECONDS)  # older than the racy window: cacheable
        with mock.patch.object(identity, "cache_path", lambda: cache):
            cold, first = timed(lambda: identity.content_revision(folder))
            warm, second = timed(lambda: identity.content_revision(folder))
        assert first == second, "the cached revision differs from the computed one"
        with open(folder / "model.safetensors", "rb") as f:
            plain, _ = timed(lambda: hashlib.file_digest(f, "sha256"))
        legacy, _ = timed(lambda: identity.legacy_revision(folder))
    gb = size / 1e9
    print(f"synthetic model.safetensors: {gb:.2f} GB; {identity.WORKERS} hashing thread(s)")
    print(f"{'what':44} {'seconds':>9} {'GB/s':>8}")
    rows = [
        ("content revision, cold (weights read once)", cold, True),
        ("content revision, cached (a stat per file)", warm, False),
        ("one sequential SHA-256 (reference)", plain, True),
        ("legacy revision (names and sizes)", legacy, False),
    ]
    for label, seconds, reads in rows:
        rate = f"{gb / seconds:8.2f}" if reads else f"{'-':>8}"
        print(f"{label:44} {seconds:9.4f} {rate}")
    print(f"cached / cold: {warm / cold:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
