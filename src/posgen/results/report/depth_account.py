"""The run report's "The decomposition's account" block of the evidence-depth section
(:mod:`posgen.results.scores.depth_account`; docs/depth.md).

Per model, one figure of the gold NLL's curve under ``logits=`` plain, additive, distance
and key (each depth minus the ends' mean, paired 95 % intervals; the gaps in the panel);
per task, one figure of the question's attention mass on the evidence, every model
(random-init twin included) in a column: the mass over layers and heads by depth,
measured and under each form of the fit, and each layer's mass gap, measured against the
additive fit's; under them the statement of each model and task, by the rule of
docs/depth.md, and the mass's gaps over layers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from posgen.results.folder.store import read_parquet
from posgen.results.report.figure_record import png_bytes
from posgen.results.report.plots import new_figure
from posgen.results.report.render import Block
from posgen.results.scores.depth_account import (
    LOGIT_FORMS,
    MASS_FORMS,
    account_sentence,
    curve_scores,
    mass_scores,
    mass_summary,
)

METRIC = "perplexity"  # the gold NLL, nats: the curve drawn and stated
COLORS = {"plain": "black", "measured": "black", "additive": "tab:blue",
          "distance": "tab:red", "key": "tab:green"}  # fmt: skip


def read_account(root: Path):
    """``(values, masses)`` of every model's account in a run folder (None, None without)."""
    import pandas as pd

    folder = Path(root) / "depth_account"
    values = sorted(folder.glob("*.values.parquet")) if folder.is_dir() else []
    if not values:
        return None, None
    masses = [folder / p.name.replace(".values.", ".mass.") for p in values]
    frames = [pd.concat([read_parquet(p) for p in paths]) for paths in (values, masses)]
    return frames[0], frames[1]


def _iv(r) -> str:
    return f"{r['value']:+.3g} [{r['ci_lo']:+.3g}, {r['ci_hi']:+.3g}]"


def _errorbar(ax, rows, key: str, form: str, dx: float, y: str = "value") -> None:
    x = np.array([r[key] for r in rows], dtype=float) + dx
    v = np.array([r[y] for r in rows])
    lo, hi = (np.array([r[f"{y}_lo" if y == "diff" else "ci_lo"] for r in rows]),
              np.array([r[f"{y}_hi" if y == "diff" else "ci_hi"] for r in rows]))  # fmt: skip
    ax.errorbar(x, v, yerr=[v - lo, hi - v], color=COLORS[form], marker="o", ms=3, lw=1,
                capsize=0, label=form)  # fmt: skip


def curve_figure(scores: dict, model: str) -> bytes | None:
    """One panel per task: the gold NLL minus its ends' mean by depth under each form."""
    curves = [r for r in scores["curves"] if r["model"] == model and r["metric"] == METRIC]
    tasks = sorted({r["task"] for r in curves})
    if not tasks:
        return None
    fig, axes = new_figure(1, len(tasks), figsize=(5.2 * len(tasks), 3.8))
    for ax, task in zip(axes[0], tasks, strict=True):
        written = []
        for k, form in enumerate(LOGIT_FORMS):
            rows = sorted((r for r in curves if r["task"] == task and r["form"] == form),
                          key=lambda r: r["depth"])  # fmt: skip
            if rows:
                _errorbar(ax, rows, "depth", form, 0.012 * (k - 1.5), y="diff")
            g = [r for r in scores["gaps"] if (r["model"], r["task"], r["metric"], r["form"])
                 == (model, task, METRIC, form)]  # fmt: skip
            written += [f"gap, {form}: {_iv(g[0])}"] if g else []
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xlabel("evidence depth D (text form)")
        ax.set_ylabel("gold NLL (nats) minus its mean\nat D = 0 and 1 (paired 95 % CI)")
        ax.set_title(f"{task}: logits= in every layer", fontsize=9)
        ax.text(0.02, 0.02, "\n".join(written), transform=ax.transAxes, fontsize=7, va="bottom")
        ax.legend(fontsize=7, loc="upper right", frameon=False)
    fig.suptitle(f"The decomposition's account: {model}", fontsize=10)
    fig.tight_layout()
    return png_bytes(fig)


def mass_figure(rows: list[dict], summary: list[dict], task: str) -> bytes | None:
    """Per model a column: the mass over layers by depth (every form), each layer's gap."""
    models = sorted({(r["random_init"], r["model"]) for r in rows if r["task"] == task})
    if not models:
        return None
    fig, axes = new_figure(2, len(models), figsize=(5.0 * len(models), 6.6))
    for col, (twin, model) in enumerate(models):
        mine = [r for r in summary if (r["task"], r["model"]) == (task, model)]
        for k, form in enumerate(MASS_FORMS):
            at = [r for r in mine if r["form"] == form and isinstance(r["depth"], float)]
            _errorbar(axes[0][col], at, "depth", form, 0.012 * (k - 1.5))
        layers = [r for r in rows if (r["task"], r["model"]) == (task, model)]
        for k, form in enumerate(("measured", "additive")):
            gap = sorted((r for r in layers if r["form"] == form and r["depth"] == "gap"),
                         key=lambda r: r["layer"])  # fmt: skip
            _errorbar(axes[1][col], gap, "layer", form, 0.15 * (k - 0.5))
        axes[0][col].set_title(f"{model}{' (random-init twin)' if twin else ''}", fontsize=9)
        axes[0][col].set_xlabel("evidence depth D")
        axes[0][col].set_ylabel("question → evidence mass\n(mean over layers, heads; 95 % CI)")
        axes[1][col].axhline(0, color="grey", lw=0.5)
        axes[1][col].set_xlabel("layer")
        axes[1][col].xaxis.get_major_locator().set_params(integer=True)
        axes[1][col].set_ylabel("mass gap: D = 0.5 minus\nthe ends' mean (paired 95 % CI)")
        for ax in axes[:, col]:
            ax.legend(fontsize=7, frameon=False)
    fig.suptitle(f"Question → evidence attention mass, measured and fitted: {task}", fontsize=10)
    fig.tight_layout()
    return png_bytes(fig)


def mass_sentence(summary: list[dict], model: str, task: str) -> str:
    """The mass's gaps over layers and heads, measured and per fit form, with intervals."""
    mine = {(r["form"], r["depth"]): r for r in summary if (r["model"], r["task"]) == (model, task)}
    if ("measured", "gap") not in mine:
        return "The mass's gap needs depths 0, 0.5 and 1."
    fits = "; ".join(
        f"{f} fit {_iv(mine[(f, 'gap')])} (minus measured {_iv(mine[(f, 'gap - measured')])})"
        for f in MASS_FORMS[1:]
    )
    return f"Question → evidence mass gap over layers: measured {_iv(mine[('measured', 'gap')])}; {fits}."


def account_blocks(root: Path) -> list[Block]:
    """The sub-block of a run folder's account (none without one)."""
    values, masses = read_account(root)
    if values is None:
        return []
    scores, rows, summary = curve_scores(values), mass_scores(masses), mass_summary(masses)
    blocks: list[Block] = [("h", 3, "The decomposition's account"), ("p", INTRO)]
    for model in sorted(values["model"].unique()):
        png = curve_figure(scores, model)
        if png is not None:
            blocks.append(("img", f"The decomposition's account: {model}", png))
    for task in sorted(values["task"].unique()):
        png = mass_figure(rows, summary, task)
        if png is not None:
            blocks.append(("img", f"Question to evidence mass: {task}", png))
        for model in sorted(values["model"].unique()):
            forms = [r for r in scores["forms"] if (r["model"], r["task"], r["metric"])
                     == (model, task, METRIC)]  # fmt: skip
            text = f"{account_sentence(forms)} {mass_sentence(summary, model, task)}"
            blocks.append(("p", f"{model} / {task} / gold NLL: {text}"))
    return blocks


INTRO = (
    "The same documents with the evidence moved in the text, scored with each layer's "
    "attention logits replaced by their exact fit W ≈ a[i−j] + b[i] + c[j] (logits=additive), "
    "its distance term (distance) or its key term (key), beside plain. Gaps as above (gold "
    "NLL, nats: lost in the middle is a gap above 0). The mass is the softmax weight the "
    "question's tokens put on the evidence passage's tokens, averaged over the question's "
    "tokens and the heads: measured on the plain forward, and under each form of the fit "
    "of the same logits. The statements follow the rule of docs/depth.md."
)
