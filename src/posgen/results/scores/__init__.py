"""Scores computed from the tidy tables: degradation with its intervals, position
tolerance, fit quality, each model's tolerance under document resampling, the cross-model
relation, a run's whole score set, the length run's curves, effective lengths and
attention-output drift, the per-layer profile of ``posgen layers`` and the scores of
``posgen cause`` (what survives the additive form, its predicted change)."""
