"""The attention mask one layer received, as transformers' sdpa mask function builds it.

The capture (:mod:`posgen.harness.model_side.logits.capture`) registers its attention
function with the sdpa mask function, which builds no mask where sdpa's causal kernel
does the masking (an unpadded causal forward, queries = keys): ``LayerMask.mask`` is then
None and ``causal`` says whether the layer attends j ≤ i (a decoder) or every key. Padding,
sliding windows and custom patterns arrive as the model's own [B, 1, n, keys] mask (bool,
True = attend; a model may also pass an additive float mask, 0 = attend). What the
capture's consumers and the eager attention need is derived from it on demand, never an
n × n tensor unless asked for: ``attended`` (where the layer may attend) and ``additive``
(a block of query rows as eager attention adds it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LayerMask:
    """The mask one layer received, as transformers' sdpa mask function builds it.

    ``mask`` None: no mask was built; the layer attends causally (``causal``, j ≤ i) or to
    every key. Else [B, 1, n, keys], bool (True = attend) or additive float (0 = attend).
    Layers that receive the same mask object share one ``LayerMask``, so what is derived
    from it (``attended``) is built once per forward."""

    mask: torch.Tensor | None
    batch: int
    queries: int
    keys: int
    causal: bool
    device: torch.device
    _attended: dict = field(default_factory=dict, repr=False)

    def attended(self, window: int | None = None) -> torch.Tensor:
        """[B, 1, n, keys] bool, True where the layer may attend; with ``window`` only the
        band 0 ≤ i − j < window of it (Λ's local branch). Built on first use (O(n²) bool)."""
        if window not in self._attended:
            if self.mask is None:
                allowed = self._pattern(0, self.queries)
                allowed = allowed.expand(self.batch, 1, self.queries, self.keys)
            else:
                mask = self.mask[:, :, :, : self.keys]
                allowed = mask if mask.dtype == torch.bool else mask == 0
            if window is not None:  # i − j < window, i.e. j − i ≥ 1 − window
                band = torch.ones(self.queries, self.keys, dtype=torch.bool, device=allowed.device)
                allowed = allowed & band.triu_(1 - window)
            self._attended[window] = allowed
        return self._attended[window]

    def additive(self, start: int, stop: int, dtype: torch.dtype) -> torch.Tensor | None:
        """Query rows start..stop−1 as eager attention adds them: [B|1, 1, r, keys] with 0
        where attended and ``finfo(dtype).min`` elsewhere (transformers' eager mask), or
        None where every key is attended."""
        if self.mask is None:
            if not self.causal:
                return None
            allowed = self._pattern(start, stop)
        else:
            allowed = self.mask[:, :, start:stop, : self.keys]
            if allowed.dtype != torch.bool:
                return allowed
        zero = torch.zeros((), dtype=dtype, device=allowed.device)
        return torch.where(allowed, zero, torch.finfo(dtype).min)

    def sees_every_key(self) -> bool:
        """Whether the last query row may attend every key (no padding in a causal mask)."""
        if self.mask is None:
            return True
        last = self.mask[:, :, -1, : self.keys]
        return bool(last.all() if last.dtype == torch.bool else (last == 0).all())

    def _pattern(self, start: int, stop: int) -> torch.Tensor:
        """[1, 1, r, keys] bool of the unbuilt mask (queries = keys): j ≤ i, or all True."""
        if not self.causal:
            return torch.ones(1, 1, stop - start, self.keys, dtype=torch.bool, device=self.device)
        i = torch.arange(start, stop, device=self.device)[:, None]
        return (torch.arange(self.keys, device=self.device)[None, :] <= i)[None, None]
