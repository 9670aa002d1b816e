"""The start-up hook activates only for the lm-eval command line."""

from __future__ import annotations

import pytest

from posgen._lm_eval_hook import _is_lm_eval_cli


@pytest.mark.parametrize(
    ("argv0", "orig", "expected"),
    [
        ("/venv/bin/lm_eval", ["/venv/bin/python", "/venv/bin/lm_eval", "--tasks", "x"], True),
        ("/venv/bin/lm-eval", ["/venv/bin/python", "/venv/bin/lm-eval"], True),
        ("-m", ["/venv/bin/python", "-m", "lm_eval", "--help"], True),
        ("-m", ["/venv/bin/python", "-m", "lm_eval.__main__"], True),
        ("-m", ["/venv/bin/python", "-m", "pytest", "lm_eval"], False),
        ("-c", ["/venv/bin/python", "-c", "import lm_eval"], False),
        ("/venv/bin/posgen", ["/venv/bin/python", "/venv/bin/posgen", "run"], False),
        ("/venv/bin/accelerate", ["python", "/venv/bin/accelerate", "launch"], False),
    ],
)
def test_hook_detects_only_the_lm_eval_cli(argv0, orig, expected):
    assert _is_lm_eval_cli(argv0, orig) is expected
