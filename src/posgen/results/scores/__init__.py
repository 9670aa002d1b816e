"""Scores computed from the tidy tables: degradation with its intervals, position
tolerance, fit quality, each model's tolerance under document resampling, the cross-model
relation, a run's whole score set, and the length run's curves, effective lengths and
attention-output drift."""
