"""posgen.results: what a run leaves behind, and what is read from it.

Grouped by role, each subpackage importing only from itself and the ones below it:

- ``stats``: intervals, seeded resampling over documents, the gate's paired test.
- ``folder``: the run folder: its schema, store, writer lock and model labels.
- ``tables``: tidy rows and per-document pairs from lm-eval output; realised amounts.
- ``scores``: degradation, tolerance, fit quality, the cross-model relation, length scores.
- ``report``: the report (Markdown and HTML), its figures, and ``posgen compare``.
- ``gate``: the CI regression gate (``posgen baseline`` and ``posgen check``).
- ``ingest``: a posgen run folder from plain lm-eval output folders.
"""

# subpackage -> rank; a module imports only from its own subpackage and lower ranks
LAYERS = {
    "stats": 0,
    "folder": 0,
    "tables": 1,
    "scores": 2,
    "report": 3,
    "gate": 3,
    "ingest": 4,
}
