"""What hf-posgen reads from a model's config before its weights load.

A length scheme given as text (``length=``) is parsed (``infllm`` completed from the
config's trained context, :func:`resolve_length`); a rope-scaling scheme
(``dynamic:F``, ``yarn:F``) becomes ``from_pretrained`` kwargs built from the config
(:func:`length_load_kwargs`), and ``layers=``/``heads=`` past the model's last layer or
head are refused from the config alone (:func:`check_layers_in_config`), as is what the
model's position family cannot take (:func:`check_family_in_config`), as is a
``max_length=`` past the positions one forward of the model takes
(:func:`check_max_length`), and the installed
libraries are checked for what posgen uses with this model (:func:`require_compatible`).
"""

from __future__ import annotations

from typing import Any

from posgen.compat import require
from posgen.harness.model_family import family_of, family_of_type
from posgen.harness.model_side.attention.length import config_refusal
from posgen.harness.model_side.perturbation import ModelPerturbation
from posgen.harness.model_side.positions.selection import check_heads, check_layers
from posgen.harness.position_family import check_schemes, length_limit
from posgen.perturbations.base import PerturbationError
from posgen.perturbations.length import LengthInfLLM, LengthPerturbation, parse_length


def parse_length_arg(value: str | LengthPerturbation | None) -> LengthPerturbation | None:
    """``length=`` -> its scheme (None: no length scheme)."""
    if value is None or isinstance(value, LengthPerturbation):
        return value
    try:
        return parse_length(str(value))
    except PerturbationError as exc:
        raise PerturbationError(f"length={value}: {exc}") from None


def _config(pretrained: str, given: dict[str, Any]) -> Any:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(
        pretrained, trust_remote_code=given.get("trust_remote_code", False)
    )


def check_layers_in_config(pretrained: str, p: ModelPerturbation, given: dict[str, Any]) -> None:
    """Refuse ``layers=``/``heads=`` past the last one from the config alone, before
    weights load."""
    if p.layers is None:
        return
    text = _config(pretrained, given).get_text_config()
    if getattr(text, "num_hidden_layers", None) is not None:
        check_layers(p.layers, int(text.num_hidden_layers), pretrained)
    if getattr(text, "num_attention_heads", None) is not None:
        check_heads(p.heads, int(text.num_attention_heads))


def resolve_length(
    pretrained: Any, scheme: LengthPerturbation | None, given: dict[str, Any]
) -> LengthPerturbation | None:
    """``length=infllm``: its missing parameters from the model's trained context C
    (``max_position_embeddings``), checked against C and the model's config (RoPE,
    soft-capping, sliding windows) before weights load; other schemes unchanged."""

    if not isinstance(scheme, LengthInfLLM):
        return scheme

    config = getattr(pretrained, "config", None) if not isinstance(pretrained, str) else None
    config = (config or _config(pretrained, given)).get_text_config()
    trained = getattr(config, "max_position_embeddings", None)
    if trained is None:
        raise PerturbationError(
            f"length={scheme.to_string()}: the model config has no max_position_embeddings"
        )
    try:
        resolved = scheme.for_context(int(trained))
    except PerturbationError as exc:
        raise PerturbationError(f"length={scheme.to_string()}: {exc}") from None
    reason = config_refusal(resolved, config)
    if reason is not None:
        raise PerturbationError(f"length={scheme.to_string()}: {reason}")
    return resolved


def length_load_kwargs(
    pretrained: Any, scheme: LengthPerturbation | None, given: dict[str, Any]
) -> dict[str, Any]:
    """``from_pretrained`` kwargs of a rope-scaling length scheme (read from the config)."""
    if scheme is None or scheme.rope_type is None:
        return {}
    if not isinstance(pretrained, str):
        raise PerturbationError(
            f"length={scheme.to_string()} is applied at load time: pass pretrained= as a path"
        )
    clash = sorted({"rope_parameters", "rope_scaling"} & set(given))
    if clash:
        raise PerturbationError(f"length={scheme.to_string()} sets the rope; drop {clash}")
    return scheme.load_kwargs(_config(pretrained, given))


def check_family_in_config(pretrained: str, p: ModelPerturbation, given: dict[str, Any]) -> None:
    """Refuse what the model's position family cannot take
    (:func:`posgen.harness.position_family.check_schemes`: ``layers=`` on learned absolute
    positions, a length scheme past a learned table or other than ``none`` on ALiBi, any
    other scheme on a model without positions, ...) from the config alone, before weights
    load."""
    if not p.is_set:
        return
    from types import SimpleNamespace

    specs = (("positions", p.positions), ("features", p.features))
    what = " and ".join(f"{k}={v.to_string()}" for k, v in specs if v is not None)
    check_schemes(SimpleNamespace(config=_config(pretrained, given)), p, what)


def check_max_length(pretrained: Any, given: dict[str, Any]) -> None:
    """Refuse ``max_length=`` (``hf``'s) past the positions one forward of the model takes
    (a learned table's rows, MPT's ``max_seq_len``:
    :func:`posgen.harness.position_family.length_limit`), from the config alone, before
    weights load."""
    asked = given.get("max_length")
    if asked is None:
        return
    if isinstance(pretrained, str):
        config = _config(pretrained, given)
    else:
        config = getattr(pretrained, "config", None)
    limit = None if config is None else length_limit(config)
    if limit is not None and int(asked) > limit[1]:
        field, most = limit
        raise PerturbationError(
            f"max_length={asked}: the model's config sets {field} = {most}, the most "
            f"positions one forward of it takes; give max_length <= {most} or leave it out"
        )


def require_compatible(pretrained: Any, given: dict[str, Any]) -> None:
    """:func:`posgen.compat.require` for this model (a path, whose config is read, or a
    loaded model), before its weights load: every internal hf-posgen uses and the rotary
    function of the model's family, so a moved internal stops the model at its
    construction, not inside the first request. Raises :class:`~posgen.compat.CompatError`."""

    if isinstance(pretrained, str):
        family = family_of_type(getattr(_config(pretrained, given), "model_type", None))
    else:
        family = family_of(pretrained)
    require([family.name])
