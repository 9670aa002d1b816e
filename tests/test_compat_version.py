"""posgen refuses an lm-eval release it is not tested with, saying which one it needs."""

from __future__ import annotations

import pytest

from posgen.compat import (
    LM_EVAL_TESTED,
    UnsupportedLmEvalError,
    require_supported_lm_eval,
)


def test_the_installed_release_is_the_supported_one() -> None:
    require_supported_lm_eval()
    require_supported_lm_eval(f"{LM_EVAL_TESTED}+editable")


@pytest.mark.parametrize("other", ["0.4.12", "0.4.14", "0.5.0.dev0"])
def test_another_release_is_refused_with_the_fix(other: str) -> None:
    with pytest.raises(
        UnsupportedLmEvalError,
        match=rf"tested with lm-eval {LM_EVAL_TESTED} only.*{other}.*pip install",
    ):
        require_supported_lm_eval(other)
