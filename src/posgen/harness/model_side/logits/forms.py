"""``logits=``: a head's pre-softmax logits replaced by (parts of) their exact additive fit.

For one row of a batch and P heads, ``W`` [P, m, m] are the logits over the row's m real
tokens and F ⊆ {(i, j): j ≤ i} the entries the layer attends (the causal mask, a sliding
window, or any mask the model passes). The exact least-squares fit over F
(:mod:`posgen.harness.additive_fit.logit_fit`, structured solve for a causal or band F)

    W[i, j] ≈ a[i−j] + b[i] + c[j],   (i, j) ∈ F

gives the replacement of each form, on F only (what the layer does not attend stays so):

============  ==========================================================================
``additive``  a[i−j] + b[i] + c[j]: the fit itself
``distance``  a[i−j] + b[i]: the distance term alone. b[i] is constant along a softmax
              row, so after the softmax this is a[i−j] alone
``key``       b[i] + c[j]: the key term alone; after the softmax, c[j] alone
``foreign``   a'[i−j] + b[i] + c[j]: the fit with its distance term a' taken from the fit
              of another sequence of at least m tokens (a :class:`LogitDonor`)
``shuffled``  a[i−j] + b[i] + c[j] + ε[i, σᵢ(j)]: the fit plus its own residual
              ε = W − fit, permuted within each query row's fitted entries by a seeded
              permutation σᵢ (keyed on the seed, the layer and the row's tokens)
============  ==========================================================================

The per-term values follow the fit's normalisation (c without weighted mean or linear
trend, b without mean, a carries the constant and the linear trend); the fitted values
``additive`` do not depend on it, and neither do the softmax rows of ``distance`` (a
linear trend g·(i−j) in a row is −g·j plus a row constant) or ``key`` up to that trend.
No torch at import: forms are checked before any weights load.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from posgen.perturbations.base import PerturbationError

if TYPE_CHECKING:
    import torch

FORMS = ("additive", "distance", "key", "foreign", "shuffled")
SHUFFLE_STREAM = "posgen/logits-shuffled/v1"


@dataclass(frozen=True)
class LogitForm:
    """One replacement form (module doc); ``parse`` reads ``logits=``."""

    name: str
    forms: ClassVar[tuple[str, ...]] = FORMS

    def __post_init__(self) -> None:
        if self.name not in FORMS:
            close = difflib.get_close_matches(self.name, FORMS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise PerturbationError(
                f"logits={self.name}: not a form{hint}; forms: {', '.join(FORMS)}"
            )

    @classmethod
    def parse(cls, value: str | LogitForm | None) -> LogitForm | None:
        """``logits=`` value -> form (None for ``None``/``''``/``none``)."""
        if value is None or isinstance(value, LogitForm):
            return value
        text = str(value).strip().lower()
        return None if text in ("", "none") else cls(text)

    @property
    def needs_donor(self) -> bool:
        """Whether the form takes its distance term from another sequence."""
        return self.name == "foreign"

    def to_string(self) -> str:
        return self.name


@dataclass(frozen=True)
class LogitDonor:
    """The distance terms a' of another sequence's fit, per layer: ``a[layer]`` [H, N]
    float64 (every query head of the layer, distances 0..N−1). ``label`` names the
    sequence (it enters the results' record and the response-cache key)."""

    a: dict[int, Any] = field(repr=False)
    label: str = ""

    def distance_term(self, layer: int, heads: list[int], m: int) -> torch.Tensor:
        """a'[heads, :m] of ``layer``; refuses a row longer than the donor."""
        a = self.a.get(layer)
        if a is None:
            raise RuntimeError(f"logits=foreign: the donor {self.label} has no layer {layer}")
        if a.shape[-1] < m:
            raise RuntimeError(
                f"logits=foreign: a row of {m} tokens is longer than the donor "
                f"{self.label} ({a.shape[-1]} tokens): its distance term has no a[d ≥ "
                f"{a.shape[-1]}]"
            )
        return a[heads, :m]


def check_beside_length(logits: LogitForm | None, length: Any) -> None:
    """Refuse ``logits=`` beside a length scheme that runs its own attention function
    (Λ attention): both replace the model's attention. No torch: ``hf-posgen`` checks it
    before any weights load."""
    if logits is not None and length is not None and length.uses_attention:
        raise PerturbationError(
            f"logits={logits.name} and length={length.to_string()} both replace the "
            "attention function; run them apart (drop logits= or length=)"
        )


def with_donor(new: Any, donor: LogitDonor | None) -> Any:
    """The model-side perturbation ``new`` checked for ``logits=``: not beside Λ
    attention (both replace the attention function), and for ``foreign`` a ``donor``
    (whose label it then records)."""
    import dataclasses

    if new.logits is None:
        return new
    check_beside_length(new.logits, new.length)
    if not new.logits.needs_donor:
        return new
    if donor is None:
        raise PerturbationError(
            "logits=foreign takes its distance term from another sequence's fit: set "
            "HFPosgenLM.logit_donor first"
        )
    return dataclasses.replace(new, donor=donor.label)


def logit_change(
    form: LogitForm,
    logits: torch.Tensor,
    fits: Any,
    fitted: torch.Tensor,
    donor_a: torch.Tensor | None = None,
    shuffle_keys: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """W' − W [P, m, m] float32: the replacement of ``logits`` W [P, m, m] by ``form`` on
    the fitted entries ``fitted`` [m, m] bool, 0 elsewhere; written into ``out`` (a
    contiguous [P, m, m] float32) when given.

    ``fits``: the :class:`~posgen.harness.additive_fit.logit_fit.HeadFits` of ``logits``
    over ``fitted`` (or any object with its ``a``, ``b``, ``c``); ``donor_a`` [P, m] for
    ``foreign``; ``shuffle_keys`` [P, m, m] float, random sort keys for ``shuffled``.
    """
    import torch

    p, m = logits.shape[0], logits.shape[-1]
    if out is None:
        out = torch.empty(p, m, m, dtype=torch.float32, device=logits.device)
    fit = reversed_form_logits(form, fits.a, fits.b, fits.c, torch.empty_like(out), donor_a)
    torch.sub(fit.flip(1), logits, out=out).masked_fill_(~fitted, 0.0)
    if form.name == "shuffled":  # the fit plus its residual W − fit, permuted in each row
        if shuffle_keys is None:
            raise ValueError("logits=shuffled needs the row's shuffle keys")
        out.add_(shuffled_within_rows(-out, fitted, shuffle_keys))
    return out


def reversed_form_logits(
    form: LogitForm,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    out: torch.Tensor,
    donor_a: torch.Tensor | None = None,
) -> torch.Tensor:
    """The form's logits with the query rows in reverse order, written into ``out``
    [P, m, m] (contiguous): ``out[p, m − 1 − i, j]`` is the logit of (i, j) for j ≤ i and
    every fitted distance, the dtype's minimum elsewhere (above the diagonal, and at
    distances the fit leaves out, e.g. past a band): a[i−j] + b[i] + c[j] (``additive``,
    ``shuffled`` without its residual; ``foreign`` with ``donor_a`` [P, m] for a),
    a[i−j] + b[i] (``distance``), b[i] + c[j] (``key``), from the fit's terms ``a``, ``b``,
    ``c`` [P, ≥ m].

    Reversed, the distance term is a Hankel matrix, ``u[i' + j]`` with u = (a[m−1], …,
    a[0], min, …, min) (2m − 1 long): a strided view of u, no copy. So the whole map costs
    two passes over ``out`` (the view plus c written, b added), and the layer's mask comes
    with it: no masked fill."""
    import torch

    p, m = out.shape[0], out.shape[-1]
    low = torch.finfo(out.dtype).min
    u = torch.full((p, 2 * m - 1), low, dtype=out.dtype, device=out.device)
    fitted = torch.isfinite(a[:, :m])  # the distances the fit has: the others stay masked
    if form.name != "key":
        a = (donor_a if form.needs_donor else a)[:, :m].to(out.dtype)
    u[:, :m] = torch.where(fitted, a if form.name != "key" else 0.0, low).flip(-1)
    hankel = u.as_strided((p, m, m), (u.stride(0), 1, 1))
    b = b[:, :m].to(out.dtype).flip(-1)[:, :, None]
    if form.name == "distance":
        return torch.add(hankel, b, out=out)
    torch.add(hankel, c[:, None, :m].to(out.dtype), out=out)
    return out.add_(b)


def shuffled_within_rows(
    values: torch.Tensor, fitted: torch.Tensor, keys: torch.Tensor
) -> torch.Tensor:
    """``values`` [P, m, m] with each query row's entries on ``fitted`` [m, m] permuted
    among themselves in the order of ``keys`` [P, m, m] (values off ``fitted`` must be 0;
    they stay 0). Slot t of a row with k fitted entries takes, for t < k, the value at the
    t-th smallest key's column and puts it at the t-th fitted column."""
    import torch

    inf = torch.tensor(float("inf"), device=values.device)
    columns = torch.arange(values.shape[-1], device=values.device, dtype=torch.float32)
    random_order = torch.where(fitted, keys.float(), inf).argsort(-1)
    index_order = torch.where(fitted, columns, inf).expand_as(values).argsort(dim=-1, stable=True)
    out = torch.zeros_like(values)
    return out.scatter_(-1, index_order, values.gather(-1, random_order))
