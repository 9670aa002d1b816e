"""``posgen ingest``: plain lm-eval output folders read back (results files and logged
samples) and turned into a posgen run folder with the same tables, scores and report."""
