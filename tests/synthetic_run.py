"""Build run folders from synthetic, lm-eval-shaped output (no model), for the tests.

The per-document values are planted: each model has a ``sensitivity`` s, and a document's
per-word NLL rises by ``s * rate`` (times a per-document factor), so degradation grows
with s and the rate; cloze accuracy drops with probability ``s * rate``. An optional
``base_shift`` b raises every document's per-word NLL in every cell, unperturbed
included, by ``b`` times a fixed per-document factor in [0.5, 1.5] (a model worse at base).
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pandas as pd

from posgen import __version__
from posgen.results.folder.config import Decompose, ModelEntry, RunConfig, Scoring, SweepAxis
from posgen.results.folder.run_store import RunStore
from posgen.results.folder.schema import SCHEMA_VERSION
from posgen.results.tables.tidy import cell_record

RATES = [0.05, 0.2, 0.5]
SIGMAS = [0.5, 2.0]
TASKS = ("posgen_prose", "posgen_cloze")
KINDS = ("text", "position", "feature")


def config(models: dict[str, dict], seed: int = 1234, kinds=KINDS, **extra) -> dict:
    """A run config as ``posgen run`` writes it (the typed :class:`RunConfig`), sweeping
    ``kinds``, with ``extra`` keys replacing its own."""
    run = RunConfig(
        posgen_version=__version__,
        schema_version=SCHEMA_VERSION,
        lm_eval_version="0.4.13",
        suite="offline",
        suite_version=1,
        tasks=TASKS,
        limits={"posgen_prose": 30, "posgen_cloze": 60},
        preset="synthetic",
        seed=seed,
        random_init_seed=0,
        models=tuple(
            ModelEntry(
                label=k,
                path=f"/models/{k}",
                embedded=k == "embedded",
                revision="local:abc",
                random_init=bool(v.get("random_init")),
            )
            for k, v in models.items()
        ),
        batch_size=1,
        sweep={
            k: v
            for k, v in {
                "text": SweepAxis(("swap",), (0.0, *RATES)),
                "position": SweepAxis(("swap",), (0.0, *RATES)),
                "feature": SweepAxis(("rope_noise",), (0.0, *SIGMAS)),
            }.items()
            if k in kinds
        },
        decompose=Decompose(docs=0, tokens=0),
        scoring=Scoring(iters=400),
    )
    return {**run.to_dict(), **extra}


def _hash(x) -> str:
    return hashlib.sha256(json.dumps(x, sort_keys=True).encode()).hexdigest()


def _doc(i: int, perturbed: bool, **fields) -> dict:
    """A logged doc: the source id as ``doc_id``; a perturbed task adds ``posgen_doc_id``."""
    doc = {"doc_id": f"src-{i:03d}", **fields}
    return {**doc, "posgen_doc_id": doc["doc_id"]} if perturbed else doc


def prose_output(name: str, nll: np.ndarray, words: np.ndarray, perturbed: bool = False):
    samples, ll = [], -nll * words
    for i, (lli, w) in enumerate(zip(ll.tolist(), words.tolist(), strict=True)):
        text = " ".join(["word"] * int(w))
        nbytes = len(text.encode())
        samples.append(
            {
                "doc_id": i,
                "doc": _doc(i, perturbed, text=text),
                "target": text,
                "arguments": [[text]],
                "resps": [[lli]],
                "filtered_resps": [lli],
                "filter": "none",
                "metrics": ["word_perplexity", "byte_perplexity", "bits_per_byte"],
                "doc_hash": _hash(i),
                "prompt_hash": _hash(text),
                "target_hash": _hash(text),
                "word_perplexity": [lli, int(w)],
                "byte_perplexity": [lli, nbytes],
                "bits_per_byte": [lli, nbytes],
            }
        )
    tot_b = sum(s["byte_perplexity"][1] for s in samples)
    res = {
        "alias": name,
        "word_perplexity,none": math.exp(-ll.sum() / words.sum()),
        "word_perplexity_stderr,none": "N/A",
        "byte_perplexity,none": math.exp(-ll.sum() / tot_b),
        "byte_perplexity_stderr,none": "N/A",
        "bits_per_byte,none": -ll.sum() / tot_b / math.log(2),
        "bits_per_byte_stderr,none": "N/A",
    }
    return {name: res}, {name: samples}


def cloze_output(name: str, acc: np.ndarray, perturbed: bool = False):
    samples = [
        {
            "doc_id": i,
            "doc": _doc(i, perturbed, context=f"c{i}"),
            "target": 0,
            "arguments": [["c", " a"], ["c", " b"]],
            "resps": [[[-1.0, True]], [[-2.0, False]]],
            # a right answer picks choice 0 (the target), a wrong one choice 1
            "filtered_resps": [[-1.0, True], [-2.0, False]] if a else [[-2.0, False], [-1.0, True]],
            "filter": "none",
            "metrics": ["acc"],
            "doc_hash": _hash(i),
            "prompt_hash": _hash(i),
            "target_hash": _hash(0),
            "acc": float(a),
        }
        for i, a in enumerate(acc.tolist())
    ]
    n = len(acc)
    se = float(np.std(acc, ddof=1) / math.sqrt(n))
    return {name: {"alias": name, "acc,none": float(acc.mean()), "acc_stderr,none": se}}, {
        name: samples
    }


def planted_cells(sensitivity: float, seed: int, base_shift: float = 0.0, kinds=KINDS):
    """(cell, results, samples) for every cell of one model (perturbations of ``kinds``)."""
    rng = np.random.default_rng(7)  # documents: the same for every model and seed
    words = rng.integers(40, 160, 30)
    nll = rng.normal(2.5, 0.3, 30)
    acc = (rng.random(60) < 0.8).astype(float)
    nll = nll + base_shift * np.random.default_rng(11).uniform(0.5, 1.5, 30)
    noise = np.random.default_rng(seed)  # the perturbation draw
    grid = (
        [("none", "none", 0.0)]
        + [(k, "swap", r) for k in ("text", "position") if k in kinds for r in RATES]
        + [("feature", "rope_noise", s) for s in SIGMAS if "feature" in kinds]
    )
    for kind, scheme, rate in grid:
        x = rate / 4 if kind == "feature" else rate
        factor = noise.uniform(0.5, 1.5, 30)
        for task in TASKS:
            lm_task = task if kind != "text" or rate == 0 else f"perm_{scheme}_{rate}_{task}"
            cell = {
                "task": task,
                "lm_eval_task": lm_task,
                "kind": kind,
                "scheme": scheme,
                "rate": rate,
                "seed": seed,
                "perturbation_version": 0 if kind == "none" else 1,
                "perturbation_spec": ""
                if kind == "none"
                else json.dumps({"kind": kind, "name": scheme, "version": 1, "params": {}}),
            }
            if task == "posgen_prose":
                out = prose_output(lm_task, nll + sensitivity * x * factor, words, kind == "text")
            else:
                flip = noise.random(60) < sensitivity * x
                out = cloze_output(lm_task, np.where(flip, 0.0, acc), kind == "text")
            if kind == "text":
                plant_text_realised(out[1][lm_task], rate)
            yield cell, *out


def plant_text_realised(samples: list[dict], rate: float) -> None:
    """What posgen's perturbed task adds to a logged doc: its realised order statistics
    (planted: every other document moves 2·rate of its 50 words, the others nothing)."""
    for i, s in enumerate(samples):
        moved = 2 * rate if i % 2 == 0 else 0.0
        stats = {"n": 50, "fraction_moved": moved, "mean_displacement": 3 * moved}
        s["doc"].update({f"posgen_{k}": v for k, v in stats.items()})
        s["doc"].update({"posgen_dnd": moved, "posgen_idc": moved, "posgen_too_short": False})


def planted_model_side(
    kind: str, scheme: str, rate: float, task: str = "", samples: list | None = None
) -> dict | None:
    """What the model-side recorder measures (planted): one row of 40 tokens per logged
    document of ``task``."""
    if kind not in ("position", "feature"):
        return None
    moved = rate if kind == "position" else 1.0
    shift = rate * 5 if kind == "position" else rate * math.sqrt(2 / math.pi)
    items = [
        {
            "key": f"{r:02x}",
            "n": 40,
            "fraction_moved": moved,
            "mean_displacement": shift,
            "dnd": moved,
            "idc": moved,
            "docs": [[task, s["doc_id"]]],
        }
        for r, s in enumerate(samples or [])
    ]
    tokens = [f" w{t}" for t in range(12)]
    positions = list(range(12))
    if kind == "position":
        positions[2], positions[7] = 7, 2
    else:
        positions = [t + rate * 0.3 for t in positions]
    rows = [{"key": "00", "n": 40, "tokens": tokens, "positions": positions}]
    return {"realised": {"unit": "row", "items": items}, "rows": rows}


def decomposition(fit: float, layers: int = 3, heads: int = 4) -> pd.DataFrame:
    rng = np.random.default_rng(int(fit * 1000))
    rows = [
        {
            "doc": d,
            "layer": la,
            "head": h,
            "r_3axis": float(np.clip(fit + rng.normal(0, 0.05), 0, 1)),
            "r_2axis": float(np.clip(fit - 0.1 + rng.normal(0, 0.05), 0, 1)),
            "r_distance_key": float(np.clip(fit - 0.2, 0, 1)),
        }
        for d in range(2)
        for la in range(layers)
        for h in range(heads)
    ]
    return pd.DataFrame(rows)


def make_run(
    root, models: dict[str, dict], seed: int = 1234, draws: int = 1, kinds=KINDS, **extra
) -> RunStore:
    """A complete synthetic run folder (cells + decompositions), not yet reported, of
    perturbations of ``kinds``; ``draws`` > 1: perturbation seeds seed, seed+1, ... per
    perturbed cell (``--seeds``)."""
    if draws > 1:
        extra["seeds"] = draws
    store = RunStore.start(root, config(models, seed=seed, kinds=kinds, **extra))
    info_base = {"dtype": "float32", "model_revision": "local:abc"}
    for label, spec in models.items():
        info = {
            **info_base,
            "model_path": f"/models/{label}",
            "random_init": bool(spec.get("random_init")),
        }
        drawn = [
            (k, c)
            for k in range(draws)
            for c in planted_cells(
                spec["sensitivity"], seed + k, spec.get("base_shift", 0.0), kinds
            )
            if k == 0 or c[0]["kind"] != "none"
        ]
        for k, (cell, results, samples) in drawn:
            task = cell["lm_eval_task"]
            side = planted_model_side(
                cell["kind"], cell["scheme"], cell["rate"], task, samples[task]
            )
            rec = cell_record(cell, info, results, samples, __version__, seed=0, model_side=side)
            cid = f"{cell['task']}__{cell['kind']}_{cell['scheme']}_{cell['rate']:g}"
            cid += f"_seed{seed + k}" if k else ""
            store.write_cell(label, cid, rec, raw_results={"results": results}, samples=samples)
        if "fit" in spec:
            path = store.decomposition_path(label)
            path.parent.mkdir(parents=True, exist_ok=True)
            decomposition(spec["fit"]).to_parquet(path)
    return store


def edited_baseline(baseline, folder, fn):
    """A copy of the baseline file ``baseline`` in ``folder``, changed by ``fn(data)``."""
    data = json.loads(baseline.read_text())
    fn(data)
    path = folder / "edited.json"
    path.write_text(json.dumps(data))
    return path


def cli(argv: list[str]) -> int:
    """Run one posgen subcommand through its own module's parser and entry point (the
    same dispatch as ``posgen.harness.cli``, without importing the other subcommands)."""
    import argparse
    import importlib

    from posgen.harness.cli import COMMANDS

    name, rest = argv[0], argv[1:]
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"posgen {name}")
    module.configure_parser(parser)
    entry = module.main
    return int(entry(parser.parse_args(rest)) or 0)


LENGTH_SCHEMES = ("none", "lambda:4,64", "scale:2.0")
LENGTH_EXCESS = {"none": 1.0, "lambda:4,64": 0.05, "scale:2.0": 0.3}  # nats past C


def add_length(
    run_root, label: str, draw: int = 1, drop: dict | None = None, noise: float = 0.02, **settings
):
    """A planted ``posgen run --length`` folder ``RUN/length/<label>/`` (config.json and
    one record per (scheme, document), as the length runner writes them; no model).

    C = 64, max length 128, buckets of 16; a document's bucket NLL is ``b_d + 0.5/(k+1)``
    before C and ``b_d + e_s · f_d`` from C on (``b_d``, ``f_d`` fixed per document, ``e_s``
    per scheme: LENGTH_EXCESS), plus ``N(0, noise)`` per bucket drawn from ``draw`` (the
    rerun noise) and ``drop[scheme]`` past C (a planted regression). ``hard``: harder text
    past C, added to every scheme and, with ``window_stride`` among the settings, to the
    in-distribution window records too (their bucket NLL ``b_d + hard`` past C, plus
    noise: the schemes' excess over them is ``e_s · f_d``)."""
    from pathlib import Path

    from posgen.results.folder.length_config import LengthConfig, LengthFolder
    from posgen.results.folder.store import atomic_write_json, slug
    from posgen.results.scores.length import result_path

    hard = settings.pop("hard", 0.0)
    fields = {
        "model": f"/models/{label}",
        "max_length": 128,
        "trained_context": 64,
        "schemes": LENGTH_SCHEMES,
        "documents": tuple(f"doc-{i}" for i in range(6)),
        "bucket_width": 16,
        **settings,
    }
    config = LengthConfig(**fields)
    folder = Path(run_root) / "length" / slug(label)
    folder.mkdir(parents=True, exist_ok=True)
    LengthFolder.start(folder, config)
    n_docs, n_buckets = len(config.documents), config.n_buckets
    c_bucket = config.trained_context // config.bucket_width
    fixed = np.random.default_rng(7)
    base, factor = fixed.normal(3.0, 0.3, n_docs), fixed.uniform(0.5, 1.5, n_docs)
    rng = np.random.default_rng(draw)
    k, count = np.arange(n_buckets), np.full(n_buckets, float(config.bucket_width))
    for scheme in config.schemes:
        past = LENGTH_EXCESS.get(scheme, 0.2) * factor + (drop or {}).get(scheme, 0.0)
        for i, doc in enumerate(config.documents):
            means = np.where(k < c_bucket, base[i] + 0.5 / (k + 1), base[i] + past[i] + hard)
            means = means + rng.normal(0.0, noise, n_buckets)
            record = {"scheme": scheme, "document": doc, "n_tokens": config.max_length}
            record.update(nll_sum=(means * count).tolist(), count=count.tolist(), drift=None)
            atomic_write_json(result_path(folder, scheme, doc), record)
    if config.window_stride is not None:
        _add_windows(folder, config, base + hard, rng, noise)
    return folder


def _add_windows(folder, config, level, rng, noise: float) -> None:
    """A window record per document: bucket NLL ``level[d]`` + noise past C, none before."""
    from posgen.results.folder.store import atomic_write_json
    from posgen.results.scores.length_window import window_path

    c_bucket = config.trained_context // config.bucket_width
    k = np.arange(config.n_buckets)
    for i, doc in enumerate(config.documents):
        count = np.where(k < c_bucket, 0.0, float(config.bucket_width))
        means = level[i] + rng.normal(0.0, noise, config.n_buckets)
        record = {"document": doc, "nll_sum": (means * count).tolist(), "count": count.tolist()}
        atomic_write_json(window_path(folder, doc), record)


def gate_cell(
    rate: float,
    g,
    w=None,
    task: str = "posgen_prose",
    metric: str = "word_perplexity",
    degradation: float = 0.0,
    worst: bool = False,
) -> dict:
    """One cell of a gate payload (``posgen check``'s input) with per-document values
    ``g`` and weights ``w`` (default 200 words each): a position swap cell at ``rate``,
    gated on perplexity for a perplexity metric, else on accuracy; ``worst``: ``g`` is
    also the worst-case values."""
    g = np.asarray(g, dtype=float)
    w = np.full(g.size, 200.0) if w is None else np.asarray(w, dtype=float)
    docs = {"keys": [f"d{i:02d}" for i in range(g.size)], "w": w.tolist(), "g": g.tolist()}
    if worst:
        docs["g_worst"] = g.tolist()
    return {
        "task": task,
        "metric": metric,
        "lm_eval_key": f"{metric},none",
        "scale": "perplexity" if metric.endswith("perplexity") else "accuracy",
        "kind": "position",
        "scheme": "swap",
        "rate": rate,
        "degradation": degradation,
        "docs": docs,
    }
