"""The package's layering (docs/architecture.md), checked on the source: every import
statement, top-level or inside a function, of every module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "posgen"
# part -> parts it must never import
FORBIDDEN = {
    "perturbations": ("tasks", "harness", "results"),
    "tasks": ("harness", "results"),
    "results": ("harness",),
    # the model side below the drivers: hf-posgen, its hooks and attention functions are
    # used by length, run and decompose, never the other way round
    "harness.hf_posgen": ("harness.length", "harness.run", "harness.decomposition", "harness.cli"),
    "harness.decomposition": ("harness.length", "harness.run", "harness.cli"),
    # the one loader, below every driver that loads a model
    "harness.loading": (
        "harness.length",
        "harness.layers",
        "harness.run",
        "harness.cli",
        "harness.decomposition",
        "harness.hf_posgen",
    ),
    "harness.input_error": ("harness.",),
}


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """posgen modules imported anywhere in ``path``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("posgen")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("posgen"):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


@pytest.mark.parametrize("part", sorted(FORBIDDEN))
def test_no_import_goes_up_a_layer(part):
    bad = []
    for name, path in MODULES.items():
        if not name.startswith(f"posgen.{part}"):
            continue
        for target in imports(path):
            if any(target.startswith(f"posgen.{up}") for up in FORBIDDEN[part]):
                bad.append(f"{name} imports {target}")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_function_level_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def g():\n    from posgen.harness.run import plan\n")
    assert "posgen.harness.run" in imports(f)


def _graph() -> dict[str, set[str]]:
    """module -> posgen modules it imports (anywhere), edges into the importer's own
    packages' ``__init__`` left out (re-exports, not dependencies)."""
    graph = {}
    for name, path in MODULES.items():
        targets = set()
        for t in imports(path):
            while t not in MODULES and "." in t:
                t = t.rsplit(".", 1)[0]
            own_package = MODULES.get(t, Path()).name == "__init__.py" and name.startswith(t)
            if t in MODULES and t != name and not own_package:
                targets.add(t)
        graph[name] = targets
    return graph


def test_no_import_cycles_between_modules():
    graph, cycles = _graph(), []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append(" -> ".join([*trail, start]))
                elif nxt not in seen and MODULES[nxt].name != "__init__.py":
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    assert not cycles, "\n".join(sorted(set(cycles))[:10])


def _results_subpackage(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["posgen", "results"] else None


def test_results_subpackages_import_only_their_own_and_lower_ones():
    from posgen.results import LAYERS

    found = {p.name for p in (SRC / "results").iterdir() if (p / "__init__.py").exists()}
    assert found == set(LAYERS), "a results/ subpackage is missing from results.LAYERS"
    loose = [p.name for p in (SRC / "results").glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"modules outside the subpackages: {loose}"
    bad = []
    for name, path in MODULES.items():
        own = _results_subpackage(name)
        if own is None:
            continue
        for target in imports(path):
            other = _results_subpackage(target)
            if other and other != own and LAYERS[other] >= LAYERS[own]:
                bad.append(f"{name} ({own}) imports {target} ({other})")
    assert not bad, "\n".join(bad)


def test_the_subpackage_check_sees_a_sideways_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from posgen.results.report.build import regenerate\n")
    assert _results_subpackage(next(iter(imports(f)))) == "report"
