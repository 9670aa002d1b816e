"""The gate's pairing record with lm-eval's generation and prompt options (unit tier):
recorded only when a run set them, so a baseline written before they existed pairs as
before; a run with other options is refused, naming both values."""

from __future__ import annotations

import pytest

from posgen.results.folder.config import RunConfig
from posgen.results.gate.baseline_file import GateInputError
from posgen.results.gate.pairing import check_pairing, pairing_record, validate_pairing
from synthetic_run import config

CELLS = [{"model": "m", "cell": {"kind": "text", "scheme": "swap", "perturbation_version": 1}}]


def record(**options) -> dict:
    return pairing_record(RunConfig.from_dict(config({"m": {}}, **options)), CELLS, "m")


def test_a_run_without_the_options_pairs_with_a_baseline_from_before_them():
    plain = record()
    assert not {"gen_kwargs", "system_instruction", "fewshot_as_multiturn"} & set(plain)
    validate_pairing(plain, "baseline.json")
    assert check_pairing(plain, record(), allow_other_seed=False) == []


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"gen_kwargs": {"max_gen_toks": 8}}, "gen_kwargs differs (baseline None, run {'max_gen"),
        ({"system_instruction": "Be brief."}, "system_instruction differs (baseline None, run 'Be"),
        (
            {"fewshot_as_multiturn": False},
            "fewshot_as_multiturn differs (baseline None, run False)",
        ),
    ],
)
def test_a_run_with_other_options_is_refused_naming_them(options, named):
    now = record(**options)
    validate_pairing(now, "baseline.json")
    with pytest.raises(GateInputError, match=r"cannot be paired") as e:
        check_pairing(record(), now, allow_other_seed=True)  # not a draw setting
    assert named in str(e.value)
    assert check_pairing(now, record(**options), allow_other_seed=False) == []


def test_a_mistyped_option_in_a_baseline_is_refused():
    with pytest.raises(GateInputError, match="'gen_kwargs' should be an object"):
        validate_pairing({**record(), "gen_kwargs": "max_gen_toks=8"}, "baseline.json")
