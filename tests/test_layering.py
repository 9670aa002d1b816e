"""The package's layering (docs/architecture.md), checked on the source: every import
statement, top-level or inside a function, of every module. Every top-level module and
part of posgen has a rank, every module and subpackage of harness/ too, every subpackage
of results/ (``results.LAYERS``); a module imports only from its own part and lower
ranks, and no two modules import each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "posgen"
# every top-level module and part of posgen -> its rank (docs/architecture.md): a module
# imports from its own part and lower ranks only, never from its rank or above
PACKAGE_RANKS = {
    "__init__": 0,  # the version; the public names are resolved lazily, by string
    "atomic": 0,
    "cache": 0,  # posgen's cache folder
    "compat": 0,
    "perturbations": 1,
    "tasks": 2,
    "results": 3,
    "lm_eval_plugin": 3,  # registers hf-posgen by its class path, imports no harness
    "harness": 4,
    "_lm_eval_hook": 4,
    "__main__": 5,
}
# harness/: its modules and subpackages. The model side below the drivers: hf-posgen,
# its hooks and attention functions are used by decomposition, run, length and layers,
# never the other way round
HARNESS_RANKS = {
    "__init__": 0,
    "input_error": 0,  # what every refusal raises
    "embedded": 0,
    "launch": 0,  # the one launch detector (accelerate launch / torchrun)
    "additive_fit": 0,  # the exact fit: pure tensor math, used by the model side and above
    "model_side": 1,  # every intervention on a model's forward, behind one door; the families
    "loading": 2,  # the one loader, below every driver that loads a model
    "hf_posgen": 3,
    "decomposition": 4,
    "prose_cells": 5,  # posgen_prose cells scored by rolling log-likelihood (layers, cause)
    "run": 6,
    "out_folder": 7,
    "length": 8,
    "layers": 8,
    "cause": 9,  # posgen cause: the predicted change beside its replaced-logits cells
    "cli": 10,
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


def part_of(module: str, depth: int) -> str:
    """The part of ``posgen.a.b.c`` at ``depth`` (1: ``a``; 2: ``b``); ``__init__`` for
    the package above that depth itself (``posgen``, ``posgen.harness``)."""
    parts = module.split(".")
    return parts[depth] if len(parts) > depth else "__init__"


def resolved(target: str) -> str | None:
    """The posgen module an import names (``posgen.compat.internal`` -> ``posgen.compat``)."""
    while target not in MODULES and "." in target:
        target = target.rsplit(".", 1)[0]
    return target if target in MODULES else None


def upward_imports(name: str, path: Path, ranks: dict[str, int], depth: int) -> list[str]:
    """The imports of module ``name`` (source ``path``) that reach another part of rank
    at least its own's, the parts at ``depth`` ranked by ``ranks``."""
    within = "posgen" if depth == 1 else "posgen.harness"
    own = part_of(name, depth)
    bad = []
    for module in sorted({resolved(t) for t in imports(path)} - {None}):
        if not (module == within or module.startswith(within + ".")):
            continue
        other = part_of(module, depth)
        if other != own and ranks[other] >= ranks[own]:
            bad.append(
                f"{name} ({own}, rank {ranks[own]}) imports {module} ({other}, rank {ranks[other]})"
            )
    return bad


def _parts(folder: Path) -> set[str]:
    return {p.stem for p in folder.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}


def test_every_top_level_module_and_part_has_a_rank():
    assert _parts(SRC) == set(PACKAGE_RANKS)
    assert _parts(SRC / "harness") == set(HARNESS_RANKS)


def test_no_import_goes_up_a_rank_in_the_package():
    bad = [
        b for name, path in MODULES.items() for b in upward_imports(name, path, PACKAGE_RANKS, 1)
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("part", HARNESS_RANKS)
def test_no_import_goes_up_a_rank_in_harness(part):
    bad = [
        b
        for name, path in MODULES.items()
        if name.startswith("posgen.harness") and part_of(name, 2) == part
        for b in upward_imports(name, path, HARNESS_RANKS, 2)
    ]
    assert not bad, "\n".join(bad)


def test_the_checker_sees_an_upward_import_of_a_top_level_module(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from posgen.lm_eval_plugin import register_all\n")
    assert upward_imports("posgen.tasks.planted", planted, PACKAGE_RANKS, 1) == [
        "posgen.tasks.planted (tasks, rank 2) imports posgen.lm_eval_plugin "
        "(lm_eval_plugin, rank 3)"
    ]
    assert upward_imports("posgen.harness.planted", planted, PACKAGE_RANKS, 1) == []
    planted.write_text("import posgen._lm_eval_hook\n")
    assert upward_imports("posgen.lm_eval_plugin", planted, PACKAGE_RANKS, 1)
    planted.write_text("from posgen.harness.hf_posgen import model\n")
    assert upward_imports("posgen.compat.planted", planted, PACKAGE_RANKS, 1)


def test_the_checker_sees_an_upward_import_inside_harness(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("from posgen.harness.run.resolve import PlanError\n")
    assert upward_imports("posgen.harness.hf_posgen.planted", planted, HARNESS_RANKS, 2)
    assert not upward_imports("posgen.harness.cli.planted", planted, HARNESS_RANKS, 2)


def test_the_checker_sees_function_level_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def g():\n    from posgen.harness.run import resolve\n")
    assert "posgen.harness.run" in imports(f)


def _graph() -> dict[str, set[str]]:
    """module -> posgen modules it imports (anywhere), edges into the importer's own
    packages' ``__init__`` left out (re-exports, not dependencies)."""
    graph = {}
    for name, path in MODULES.items():
        targets = set()
        for t in {resolved(t) for t in imports(path)} - {None}:
            own_package = MODULES[t].name == "__init__.py" and name.startswith(t)
            if t != name and not own_package:
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
