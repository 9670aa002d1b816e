"""A task's own aggregation function, as lm-eval task YAMLs write them (``!function``)."""


def share_identical(items):
    """The share of ``[reference, prediction]`` items whose prediction is the reference."""
    return sum(1.0 for ref, pred in items if ref == pred) / len(items)
