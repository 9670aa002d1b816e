"""The size of the code, checked on the source: every module at most 400 lines (the
lm-eval model class, ``hf_posgen/model.py``, at most 300), every function at most 50 lines
(an argparse table, ``configure_parser``, excepted), and an import of posgen's own modules
inside a function only where a start-up must stay light (the command line imports the
chosen command's library inside ``main``; the lm-eval start-up hook and plugin run in
every ``lm_eval`` process) or where the import would otherwise pull a heavy library into a
module that is imported light (each named below with its reason)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "posgen"
MAX_LINES, MODEL_LINES, MAX_FUNCTION = 400, 300, 50

# modules that import posgen's own modules inside functions, and why
LAZY_IMPORTS = {
    "harness/cli/": "the command line: --help and argument errors answer before the "
    "chosen command's library (torch, transformers, lm-eval) loads",
    "_lm_eval_hook.py": "runs in every lm_eval process at start-up (a .pth line)",
    "lm_eval_plugin.py": "registers hf-posgen by class path, without importing it",
    "compat/": "the package's __init__ imports its submodules, which read its lists back: "
    "a submodule imports the package inside the function that needs it",
}
# single imports inside a function elsewhere: lm-eval's task manager (lm-eval and pandas,
# seconds to import) loads only when a task's config must be read, not for --help, an
# argument error or a report
LAZY_TASK_MANAGER = "lm-eval's task manager loads only when a task's config is read"
LAZY_PAIRS = {
    ("results/tables/metric_list.py", "posgen.tasks.lm_eval_tasks"): LAZY_TASK_MANAGER,
    ("harness/run/resolve.py", "posgen.tasks.lm_eval_tasks"): LAZY_TASK_MANAGER,
    ("harness/run/metric_check.py", "posgen.tasks.family"): LAZY_TASK_MANAGER,
}


def _modules() -> list[tuple[str, ast.Module, int]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        out.append((path.relative_to(SRC).as_posix(), ast.parse(text), len(text.splitlines())))
    return out


MODULES = _modules()


def _functions(tree: ast.Module):
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def test_every_module_is_at_most_400_lines_and_the_model_class_300():
    over = [
        f"{name}: {lines}"
        for name, _, lines in MODULES
        if lines > (MODEL_LINES if name == "harness/hf_posgen/model.py" else MAX_LINES)
    ]
    assert not over, over


def test_every_function_is_at_most_50_lines():
    over = [
        f"{name}:{fn.name} {fn.end_lineno - fn.lineno + 1}"
        for name, tree, _ in MODULES
        for fn in _functions(tree)
        if fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION
        and not (name.startswith("harness/cli/") and fn.name == "configure_parser")
    ]
    assert not over, over


def _lazy(name: str) -> bool:
    return any(name == key or (key.endswith("/") and name.startswith(key)) for key in LAZY_IMPORTS)


def test_posgen_modules_are_imported_inside_functions_only_where_start_up_needs_it():
    found = [
        f"{name}:{fn.name} imports {node.module}"
        for name, tree, _ in MODULES
        if not _lazy(name)
        for fn in _functions(tree)
        for node in ast.walk(fn)
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("posgen")
        and (name, node.module) not in LAZY_PAIRS
    ]
    assert not found, "\n".join(found)


def test_the_checks_see_what_they_check():
    sizes = dict((name, lines) for name, _, lines in MODULES)
    assert sizes["harness/hf_posgen/model.py"] > 50 and len(MODULES) > 200
    tree = ast.parse("def f():\n    from posgen import x\n" + "    y = 1\n" * 60)
    (fn,) = _functions(tree)
    assert fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION
    assert _lazy("harness/cli/run.py") and not _lazy("harness/run/cells.py")
