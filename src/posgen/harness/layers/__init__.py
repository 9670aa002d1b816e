"""``posgen layers``: which layers carry position (sensitivity per layer, one model load)."""
