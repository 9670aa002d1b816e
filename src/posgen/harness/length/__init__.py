"""Length generalization: running a model past its trained context under a length scheme.

Each forward of a document enters the model through the one door
(:func:`posgen.harness.model_side.door.forward`), with the length scheme (and the
position scheme) as its perturbation.

- :mod:`.nll`: per-token negative log-likelihood by position, one forward per document,
  the LM head applied over position chunks.
- :mod:`.drift`: per-layer drift of attention outputs past the trained context.
- :mod:`.decompose`: ``--decompose``, the per-head decomposition of every (scheme,
  document) on the same ids under the same forward.
- :mod:`.documents`: the built-in documents or the user's (``--data``, ``--dataset``).
- :mod:`.job`: one run from its typed config (``posgen length``, ``posgen run --length``).
- :mod:`.runner`: the (scheme, document) records of a run folder.

The command line is :mod:`posgen.harness.cli.length`.
"""
