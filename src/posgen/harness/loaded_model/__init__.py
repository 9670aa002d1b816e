"""One hf-posgen model loaded from its entry, and what the drivers do with it: the
decomposition of its weights (``posgen run``, ``posgen layers``) and posgen_prose cells
scored by rolling log-likelihood (``posgen layers``, ``posgen cause``)."""
