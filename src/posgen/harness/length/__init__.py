"""Length generalization: running a model past its trained context under a length scheme.

- :mod:`.lambda_attention`: LM-Infinite's Λ-shaped attention as a registered attention
  function, computed in query blocks (memory O(n·(G+W)), never n × n).
- :mod:`.apply`: one context manager that puts a length (+ position) scheme on a model.
- :mod:`.nll`: per-token negative log-likelihood by position, one forward per document,
  the LM head applied over position chunks.
- :mod:`.drift`: per-layer drift of attention outputs past the trained context.
- :mod:`.decompose`: ``--decompose``, the per-head decomposition of every (scheme,
  document) on the same ids under the same forward.
- :mod:`.command`: ``posgen length``.
"""
