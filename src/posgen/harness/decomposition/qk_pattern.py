"""The study's distance + key form, and the q/k pattern per RoPE frequency subspace.

Both work on the model's own queries and keys (post-RoPE, as captured by
``posgen.harness.model_side.logits.capture``); pre-RoPE vectors come from undoing the model's own
rotation (``LayerCapture.unrotate``), never from a re-implementation.

Distance + key form. With pre-RoPE key k̃_j, its mean k̄ over the fitted key positions, the
post-RoPE query q_i and the model's rotation R(j) at key position j, the logit splits exactly

    W[i, j] = s·q_i·R(j)k̃_j = D[i, j] + K[i, j],   D[i, j] = s·q_i·R(j)k̄,   K = W − D

(s = the layer's scaling; for soft-capped layers D is on the pre-cap scale). Distance axis:
â[d] = mean of D over the fitted entries at distance d; key axis: ĉ[j] = mean of K over the
fitted entries of key column j. ``r_distance_key`` is the Pearson r between W and
â[i−j] + ĉ[j] over the fitted entries. It is not a least-squares fit, so it is at most the
two-axis r (up to rounding).
"""

from __future__ import annotations

import torch

from posgen.harness.additive_fit.logit_fit import FitLayout, HeadSums, diagonal_and_column_sums


class DistanceMap:
    """D[p, i, j] = s·q_i·R(j)k̄, computed on demand per slice of heads straight into the
    summing buffer (a ``logit_fit.MapSource``), so that the full [P, n, n] map is never held.

    ``query`` [P, n, d] post-RoPE; ``rotated_mean_key`` [P, n, d] = R(j)k̄ per position.
    """

    def __init__(self, query: torch.Tensor, rotated_mean_key: torch.Tensor, scaling: float):
        self.query, self.keys, self.scaling = query, rotated_mean_key, scaling
        n = query.shape[-2]
        self.shape = (query.shape[0], n, rotated_mean_key.shape[-2])
        self.device = query.device

    def fill(self, out: torch.Tensor, heads: slice) -> None:
        q = self.query[heads].to(out.dtype) * self.scaling
        torch.bmm(q, self.keys[heads].to(out.dtype).transpose(-1, -2), out=out)

    def block(self, start: int, stop: int, width: int) -> torch.Tensor:
        """D of query rows start..stop−1 against keys 0..width−1: [P, stop − start, width] float32."""
        q = self.query[:, start:stop].float() * self.scaling
        return torch.bmm(q, self.keys[:, :width].float().transpose(-1, -2))


def distance_sums(d_map: DistanceMap | torch.Tensor, layout: FitLayout):
    """(diagonal, column) raw sums of D [P, n, n] over the fitted entries, [P, n] float64."""
    return diagonal_and_column_sums(d_map, layout)  # float32 reductions


def distance_key_r(
    w_sums: HeadSums, d_sums: tuple[torch.Tensor, torch.Tensor], layout: FitLayout
) -> torch.Tensor:
    """Pearson r of W against â[i−j] + ĉ[j] (module docstring), [P] float64, O(P n).

    ``w_sums`` from ``logit_fit.head_sums`` and ``d_sums`` from ``distance_sums`` for the
    same heads (possibly several layers' heads concatenated).
    """
    d_diag, d_cols = d_sums
    cnt_d, cnt_j, n_e = layout.count_d, layout.count_j, layout.n_entries
    w_cols = w_sums.cols + w_sums.mean[:, None] * cnt_j
    a_hat = torch.where(cnt_d > 0, d_diag / cnt_d.clamp(min=1), 0.0)
    c_hat = torch.where(cnt_j > 0, (w_cols - d_cols) / cnt_j.clamp(min=1), 0.0)
    cov = (a_hat * w_sums.diag).sum(-1) + (c_hat * w_sums.cols).sum(-1)  # centred W sums
    mean_p = ((a_hat * cnt_d).sum(-1) + (c_hat * cnt_j).sum(-1)) / n_e
    sum_p2 = (
        (a_hat**2 * cnt_d).sum(-1)
        + (c_hat**2 * cnt_j).sum(-1)
        + 2 * (layout.dc_product(a_hat) * c_hat).sum(-1)
    )
    var_p = (sum_p2 - n_e * mean_p**2).clamp(min=0.0)
    return cov / (var_p * w_sums.tss).sqrt()


def check_half_split(cos: torch.Tensor) -> int:
    """Rotary width r of a rotate-half layout (subspace m pairs dims m and m + r/2)."""
    r = cos.shape[-1]
    if r % 2 or not torch.allclose(cos[..., : r // 2], cos[..., r // 2 :]):
        raise ValueError(
            "unsupported RoPE layout: expected the rotate-half convention "
            "(cos repeated over the two halves of the rotary dimensions)"
        )
    return r


def subspace_pairs(x: torch.Tensor, rotary_dim: int) -> torch.Tensor:
    """Complex 2-D subspaces of ``x`` [..., n, d]: z[..., n, m] = x[m] + i·x[m + r/2]."""
    h = rotary_dim // 2
    return torch.complex(x[..., :h].double(), x[..., h:rotary_dim].double())


def subspace_stats(query: torch.Tensor, key: torch.Tensor, rotary_dim: int) -> dict:
    """Per RoPE subspace of pre-RoPE ``query``, ``key`` [H, n, d] (positions on dim −2).

    Returns [H, r/2] float64 tensors:
    ``key_mean_norm`` |mean_j z_j|; ``key_spread`` sqrt(mean_j |z_j − mean z|²);
    ``key_phase_concentration`` and ``query_phase_concentration`` |mean_j z_j/|z_j||, the
    mean resultant length of the phases (1: all aligned, ~1/sqrt(n): uniform).
    """
    out = {}
    zk, zq = subspace_pairs(key, rotary_dim), subspace_pairs(query, rotary_dim)
    mean_k = zk.mean(-2)
    out["key_mean_norm"] = mean_k.abs()
    out["key_spread"] = ((zk - mean_k[..., None, :]).abs() ** 2).mean(-2).sqrt()
    for name, z in (("key", zk), ("query", zq)):
        unit = z / z.abs().clamp(min=1e-30)
        out[f"{name}_phase_concentration"] = unit.mean(-2).abs()
    return out


def subspace_wavelengths(cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int) -> torch.Tensor:
    """Wavelength 2π/ω_m of each subspace, ω_m read from the model's own angles at positions 0, 1.

    ``cos``, ``sin`` [n, r] for consecutive positions (n ≥ 2).
    """
    h = rotary_dim // 2
    angle = torch.atan2(sin[..., :h].double(), cos[..., :h].double())
    omega = torch.remainder(angle[1] - angle[0], 2 * torch.pi)
    return 2 * torch.pi / omega.clamp(min=1e-12)
