"""``posgen decompose``: the attention-logit decomposition of one model (and its twin)."""
