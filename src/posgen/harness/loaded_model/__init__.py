"""One hf-posgen model loaded from its entry, and the decomposition of its weights
(``posgen run``, ``posgen layers``); its posgen_prose cells are scored by
:mod:`posgen.harness.prose_cells`."""
