"""docs/architecture.md names only files, folders and names that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
# the page as it describes the code now (its before/after table names what was)
DOC = re.sub(r"## Before and after.*?(?=\n## )", "", TEXT, flags=re.S)
PKG = ROOT / "src" / "posgen"


def _exists(name: str) -> bool:
    name = name.rstrip("/")
    candidates = [ROOT / name] + [
        PKG / part / name for part in ("", "results", "harness", "perturbations")
    ]
    return any(p.exists() for p in candidates)


def test_every_path_the_page_names_exists():
    named = set(re.findall(r"`([A-Za-z_][\w/]*(?:\.py|/))`", DOC))
    named |= set(re.findall(r"`([A-Za-z_][\w/]*/[\w]+\.py)`", DOC))
    assert len(named) > 30, "the page names the modules it describes"
    missing = sorted(n for n in named if not _exists(n))
    assert not missing, f"docs/architecture.md names what does not exist: {missing}"


def test_every_results_subpackage_and_compat_name_it_mentions_exists():
    from posgen import compat
    from posgen.results import LAYERS

    for sub in LAYERS:
        assert f"`{sub}/`" in DOC, f"results/{sub}/ is not described"
    for name in set(re.findall(r"`compat\.(\w+)", DOC)) - {"py"}:
        assert hasattr(compat, name), f"compat.{name} does not exist"


def test_the_checker_sees_a_missing_module():
    assert not _exists("results/nowhere.py") and _exists("results/gate/check.py")
    assert "Before and after" in TEXT and "Before and after" not in DOC
