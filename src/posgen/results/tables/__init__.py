"""Tidy tables: from each cell's lm-eval output to one row per (model, task, cell, metric)
and one per-document pair (base and perturbed sums), plus the realised amount each item and
cell really moved."""
