"""The CI regression gate: the baseline file (per-document degradations, NLL excess past
the trained context), its validation, and the per-cell paired test with Holm behind
``posgen check``."""
