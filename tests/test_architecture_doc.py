"""docs/architecture.md names only files, folders and names that exist, describes each
module it names, and names every top-level module, every part of harness/ and every file
of hf_posgen/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
# the page as it describes the code now (its before/after table names what was)
DOC = re.sub(r"## Before and after.*?(?=\n## )", "", TEXT, flags=re.S)
PKG = ROOT / "src" / "posgen"


def _exists(name: str) -> bool:
    name = name.rstrip("/")
    candidates = [ROOT / name] + [
        PKG / part / name
        for part in ("", "results", "harness", "perturbations", "harness/hf_posgen")
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


def _units(text: str) -> list[str]:
    """What a description is judged on: each line of a table or a code block (one entry
    each), each other paragraph whole."""
    units, fenced = [], False
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        fences = sum(ln.startswith("```") for ln in lines)
        if fenced or fences or all(ln.startswith("|") for ln in lines):
            units += lines
        else:
            units.append(" ".join(lines))
        fenced = fenced != (fences % 2 == 1)
    return units


UNITS = _units(DOC)


def _described(name: str) -> bool:
    """An entry of the page (a table row, a line of a code block, a paragraph) names
    ``name`` (alone or after folders, in backticks or in the tree) beside at least three
    words of prose: code spans and other file and folder names left out. A path is also
    found by its last folder and file (``model_side/attention/qk_noise.py``)."""
    parts = name.rstrip("/").split("/")
    tails = {"/".join(parts[i:]) + ("/" if name.endswith("/") else "") for i in range(len(parts))}
    tails = {t for t in tails if "/" in t.rstrip("/") or t == name}
    for tail in tails:
        naming = re.compile(rf"(?<![\w.])(?:\w+/)*{re.escape(tail)}(?![\w])")
        for unit in UNITS:
            if naming.search(unit):
                prose = re.sub(r"`[^`]*`|[\w./]+\.py\b|\b\w+/", " ", unit)
                if len(re.findall(r"[A-Za-z]{2,}", prose)) >= 3:
                    return True
    return False


def test_every_module_the_page_names_is_described():
    named = set(re.findall(r"`([A-Za-z_][\w/]*(?:\.py|/))`", DOC))
    bare = sorted(n for n in named if not _described(n))
    assert not bare, f"docs/architecture.md names these without describing them: {bare}"


def _entries(folder: Path) -> list[str]:
    """The modules (``x.py``) and subpackages (``x/``) of ``folder``."""
    return sorted(
        p.name if p.suffix == ".py" else f"{p.name}/"
        for p in folder.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    )


@pytest.mark.parametrize("folder", ["", "harness", "harness/hf_posgen", "harness/model_side"])
def test_every_module_of_the_package_harness_and_hf_posgen_is_described(folder):
    entries = [e for e in _entries(PKG / folder) if not (folder and e == "__init__.py")]
    missing = [e for e in entries if not _described(e)]
    assert not missing, f"docs/architecture.md does not describe {folder or 'posgen'}: {missing}"


def test_the_description_checker_needs_prose_beside_the_name():
    assert _described("door.py") and _described("compat/")
    assert not _described("nowhere.py")


def _command_rows() -> dict[str, list[str]]:
    """The table of the commands as they are: command -> the files each cell names."""
    block = TEXT[TEXT.index("| command | command line |") :].split("\n\n")[0]
    rows = {}
    for line in block.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = re.findall(r"`([\w/]+\.py)`", line)
    return rows


def test_every_command_that_writes_a_folder_has_its_files_and_the_protocol():
    """Each command's files exist; its command line (or the runner it hands the folder to)
    opens the folder through the protocol's create; a new command is six files."""
    from posgen.harness.cli import COMMANDS

    rows = _command_rows()
    assert set(rows) == {"run", "ingest", "length", "decompose", "layers", "cause"}
    for command, files in rows.items():
        assert command in COMMANDS
        missing = [f for f in files if not (PKG / f).is_file()]
        assert not missing, f"{command}: {missing} do not exist"
        sources = "".join((PKG / f).read_text(encoding="utf-8") for f in files)
        job = PKG / "harness" / command / "job.py"  # posgen length hands it to run_job
        sources += job.read_text(encoding="utf-8") if job.is_file() else ""
        opened = r"\b(\w+Folder|RunStore)\.create\(|write_folder\(\s*\"\w+\",\s*\w+Folder\b"
        assert re.search(opened, sources), command
    recipe = TEXT[TEXT.index("is six files:") : TEXT.index("The commands as they are")]
    assert len([ln for ln in recipe.splitlines() if ln.startswith("| `")]) == 6
