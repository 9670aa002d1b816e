"""The exact additive fit of attention logits, W[i, j] ≈ a[i−j] + b[i] + c[j]: its normal
equations, layouts (dense, causal, band) and solves. Pure tensor math (torch, numpy,
scipy), below everything that fits: the decomposition's capture and the ``logits=``
intervention of ``hf-posgen``."""
