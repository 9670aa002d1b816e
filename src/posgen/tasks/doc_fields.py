"""Which doc fields a part of an lm-eval task config reads, found without any data.

lm-eval renders each prompt part (``doc_to_text``, ``doc_to_target``, ``doc_to_choice``)
from one of:

- a Jinja template, rendered with the doc's fields as variables
  (``"Question: {{question.strip()}}"`` reads ``question``): the fields are the template's
  undeclared variables (``{% set %}`` names and loop variables are not fields);
- a bare field name (``doc_to_text: prompt``);
- a constant (an int, a list of choices);
- a Python function of the doc (``!function utils.doc_to_text``), or a method of a
  Python task class (``SQuAD2.doc_to_text(self, doc)``). Its source is read with
  :mod:`ast`: ``doc["x"]`` and ``doc.get("x")`` are field reads, and a call that passes
  the doc on to another function or method of the same module is followed. Any other
  use of the doc (``doc[key]``, ``len(doc)``, a call into another module) makes the
  reading *incomplete*: the fields found are read, but there may be more.

A function is given either resolved (a callable, as in a full task config) or as lm-eval's
task index stores it unresolved: ``"/abs/dir/utils.doc_to_text"``. A Python task's class
likewise (``"/abs/dir/task.SQuAD2"``).
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import meta

PARTS = ("doc_to_text", "doc_to_target", "doc_to_choice")


@dataclass(frozen=True)
class FieldReads:
    """The doc fields one prompt part reads.

    ``form``: ``template``, ``field``, ``function``, ``method``, ``constant`` or
    ``absent``; ``complete``: False when the doc also reaches code that could read more.
    """

    fields: frozenset[str]
    form: str
    complete: bool = True


_NONE = FieldReads(frozenset(), "absent")
_ENV = jinja2.Environment()


def template_reads(template: str) -> FieldReads:
    """The undeclared variables of a Jinja template (unparsable: incomplete, none)."""
    try:
        found = meta.find_undeclared_variables(_ENV.parse(template))
    except jinja2.TemplateSyntaxError:
        return FieldReads(frozenset(), "template", complete=False)
    return FieldReads(frozenset(found), "template")


def _function_path(value: str) -> tuple[Path, str] | None:
    """(module file, name) of an unresolved ``!function`` path, else None."""
    if not os.path.isabs(value) or "{" in value:
        return None
    module, _, name = value.rpartition(".")
    path = Path(f"{module}.py")
    return (path, name) if name.isidentifier() and path.is_file() else None


def value_reads(value: Any) -> FieldReads:
    """The fields read by one config value (template, field name, constant or function)."""
    if value is None:
        return _NONE
    if isinstance(value, str):
        located = _function_path(value)
        if located is not None:
            return source_reads(*located, doc_arg=0)
        if value.isidentifier():
            return FieldReads(frozenset({value}), "field")
        return template_reads(value)
    if callable(value) and not isinstance(value, type):
        return callable_reads(value)
    return FieldReads(frozenset(), "constant")


def callable_reads(fn: Any) -> FieldReads:
    """The fields a Python function of the doc reads (``functools.partial`` unwrapped)."""
    doc_arg = 0
    while isinstance(fn, functools.partial):
        doc_arg += len(fn.args)
        fn = fn.func
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        path = None
    if path is None or not hasattr(fn, "__qualname__"):
        return FieldReads(frozenset(), "function", complete=False)
    is_method = "." in fn.__qualname__
    return source_reads(Path(path), fn.__qualname__, doc_arg=doc_arg + is_method)


def part_reads(config: Mapping[str, Any], part: str) -> FieldReads:
    """The fields ``part`` (one of :data:`PARTS`) of a task config reads; for a Python
    task (``class``) its own method when the class defines one."""
    cls = config.get("class")
    if cls is not None:
        found = _method_reads(cls, part)
        if found is not None:
            return found
    return value_reads(config.get(part))


def _method_reads(cls: Any, method: str) -> FieldReads | None:
    """The reads of ``cls.method`` when ``cls`` itself (not lm-eval's base) defines it."""
    if isinstance(cls, str):
        located = _function_path(cls)
        if located is None:
            return FieldReads(frozenset(), "method", complete=False)
        path, name = located
        return source_reads(path, f"{name}.{method}", doc_arg=1, missing_ok=True)
    for klass in inspect.getmro(cls):
        if klass.__module__.startswith("lm_eval.api."):
            return None
        if method in vars(klass):
            path = inspect.getsourcefile(klass)
            qual = f"{klass.__qualname__}.{method}"
            return source_reads(Path(path), qual, doc_arg=1) if path else None
    return None


def source_reads(
    path: Path, qualname: str, doc_arg: int, missing_ok: bool = False
) -> FieldReads | None:
    """The fields function ``qualname`` (``f`` or ``Class.method``) of the module at
    ``path`` reads from its positional argument ``doc_arg``."""
    form = "method" if "." in qualname else "function"
    module = _Module(ast.parse(path.read_text(encoding="utf-8")))
    found = module.resolve(qualname, doc_arg)
    if found is None:
        return None if missing_ok else FieldReads(frozenset(), form, complete=False)
    fields, complete = module.reads(*found, seen=set())
    return FieldReads(frozenset(fields), form, complete)


class _Module:
    """The functions, classes and ``partial`` aliases of one parsed module."""

    def __init__(self, tree: ast.Module) -> None:
        self.functions: dict[str, ast.FunctionDef] = {}
        self.partials: dict[str, tuple[str, int]] = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        self.functions[f"{node.name}.{item.name}"] = item
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                alias = _partial_alias(node.value)
                if isinstance(node.targets[0], ast.Name) and alias is not None:
                    self.partials[node.targets[0].id] = alias
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                child.parent = node  # type: ignore[attr-defined]

    def resolve(self, name: str, doc_arg: int) -> tuple[ast.FunctionDef, int, str] | None:
        """(function node, doc argument position, its class or "") of a name."""
        if name in self.partials:
            target, bound = self.partials[name]
            name, doc_arg = target, doc_arg + bound
        node = self.functions.get(name)
        if node is None:
            return None
        return node, doc_arg, name.rpartition(".")[0]

    def reads(
        self, fn: ast.FunctionDef, doc_arg: int, owner: str, seen: set[tuple[int, int]]
    ) -> tuple[set[str], bool]:
        """Fields read from argument ``doc_arg`` of ``fn``, and whether that is all."""
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        if (id(fn), doc_arg) in seen:  # a recursive call: its reads are counted already
            return set(), True
        if doc_arg >= len(params):  # the doc goes into *args
            return set(), False
        seen.add((id(fn), doc_arg))
        doc, fields, complete = params[doc_arg], set(), True
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and node.id == doc and isinstance(node.ctx, ast.Load):
                got, ok = self._use(node, owner, seen)
                fields |= got
                complete = complete and ok
        return fields, complete

    def _use(self, name: ast.Name, owner: str, seen: set) -> tuple[set[str], bool]:
        """The fields one use of the doc reads (subscript, ``.get``, a followed call)."""
        parent = getattr(name, "parent", None)
        if isinstance(parent, ast.Subscript) and parent.value is name:
            key = parent.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                return {key.value}, True
            return set(), False
        if isinstance(parent, ast.Attribute) and parent.attr == "get":
            call = getattr(parent, "parent", None)
            if isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Constant):
                return {str(call.args[0].value)}, True
            return set(), False
        if isinstance(parent, ast.Call) and name in parent.args:
            return self._follow(parent, parent.args.index(name), owner, seen)
        return set(), False

    def _follow(self, call: ast.Call, pos: int, owner: str, seen: set) -> tuple[set[str], bool]:
        """Follow the doc into a call of a function (or ``self.method``) of this module."""
        func = call.func
        if isinstance(func, ast.Name):
            found = self.resolve(func.id, pos)
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
            and owner
        ):
            found = self.resolve(f"{owner}.{func.attr}", pos + 1)
        else:
            found = None
        if found is None:
            return set(), False
        return self.reads(*found, seen=seen)


def _partial_alias(value: ast.expr) -> tuple[str, int] | None:
    """``partial(f, a, b, k=v)`` -> ("f", 2); anything else -> None."""
    if not (isinstance(value, ast.Call) and value.args and isinstance(value.args[0], ast.Name)):
        return None
    func = value.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return (value.args[0].id, len(value.args) - 1) if name == "partial" else None
