"""No ``print()`` in library code: progress and notes go through a callback the command
line prints, or the ``posgen`` logger (shown by the CLI). The command line itself
(``harness/cli/``), the ``lm_eval`` start-up hook (which says why it could not register)
and the ``main`` of the shipped-data maintenance scripts print."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "posgen"
PRINTING_MODULES = {"_lm_eval_hook.py"}
PRINTING_MAINS = {"tasks/family.py", "tasks/offline.py"}  # python -m ... --write/--check


def prints(tree: ast.AST) -> list[int]:
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"
    ]


def library_prints(path: Path) -> list[int]:
    """Lines of ``path`` that call print() where the library may not."""
    rel = path.relative_to(SRC).as_posix()
    if rel.startswith("harness/cli/") or rel in PRINTING_MODULES:
        return []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if rel in PRINTING_MAINS:
        mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
        allowed = {line for m in mains for line in prints(m)}
        return [line for line in prints(tree) if line not in allowed]
    return prints(tree)


def test_library_code_does_not_print():
    found = [
        f"{p.relative_to(SRC)}:{line}" for p in SRC.rglob("*.py") for line in library_prints(p)
    ]
    assert not found, "print() in library code: " + ", ".join(found)


def test_the_check_sees_a_print(tmp_path):
    f = SRC / "harness" / "length" / "runner.py"
    assert library_prints(f) == []
    planted = tmp_path / "m.py"
    planted.write_text("def f():\n    print('x')\n")
    assert prints(ast.parse(planted.read_text())) == [2]
