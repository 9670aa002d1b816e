"""Statistics at the suite's sizes: confidence intervals for degradation and accuracy
drops, seeded bootstrap counts over documents, and the gate's weighted paired t with Holm.
Pure numpy and scipy; nothing here knows a run folder."""
