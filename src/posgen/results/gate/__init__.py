"""The CI regression gate: the baseline file (per-document degradations, NLL excess past
the trained context) and what same-seed pairing rests on, its validation, the margins in
each metric's unit with the stated power, and the per-cell non-inferiority test with Holm
behind ``posgen check`` with its table and JUnit XML."""
