"""The public API re-exported from ``posgen``: every name resolves, lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

import posgen


@pytest.mark.parametrize("name", [n for n in posgen.__all__ if n != "__version__"])
def test_every_public_name_resolves(name):
    assert getattr(posgen, name) is not None


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        posgen.nope  # noqa: B018


def test_import_posgen_loads_no_heavy_library():
    code = (
        "import sys, posgen; posgen.parse('text', 'swap:0.05'); "
        "print(','.join(m for m in ('torch', 'transformers', 'lm_eval') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_parse_is_the_registry_parse():
    p = posgen.parse("text", "swap:0.05")
    assert p.apply("a b c d e f g h i j", seed=posgen.perturbations.DEFAULT_SEED).text
