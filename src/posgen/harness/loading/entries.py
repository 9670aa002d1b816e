"""Model entries: what every command records of a model and loads it from, built here
once for every command, without loading anything.

A name is ``embedded`` (the model shipped with posgen), a local Hugging Face folder (its
revision: the content of its weights, config and tokenizer files,
:mod:`posgen.harness.loading.identity`) or a hub id (its revision: the resolved commit,
:mod:`posgen.harness.loading.hub`). ``--revision``
picks a hub model's branch, tag or commit; given with a local folder or the embedded
model it is refused, not ignored.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from posgen.harness import embedded  # looked up at call time (tests replace it)
from posgen.harness.loading.hub import HubModelError, resolve_commit
from posgen.harness.loading.identity import content_revision, legacy_revision
from posgen.harness.loading.options import HUB_ID, LoadError, LoadOptions
from posgen.harness.position_family import family_of_folder
from posgen.results.folder.config import ModelEntry
from posgen.results.folder.labels import short_labels


def model_entries(
    names: list[str],
    options: LoadOptions | None = None,
    *,
    random_init: bool = False,
    seed: int = 0,
) -> list[ModelEntry]:
    """One checked entry per model (plus its random-init twin after it) with the loading
    ``options``; nothing loads (a hub id's revision is resolved to its commit)."""
    options = options or LoadOptions()
    out: list[ModelEntry] = []
    short = dict(zip(names, short_labels(names), strict=True))
    for name in names:
        entry = replace(_entry(name, short[name], options.revision), **options.entry_fields())
        _check_attention(entry)
        out.append(entry)
        if random_init:
            out.append(
                replace(
                    entry,
                    label=f"{entry.label}+random-init",
                    random_init=True,
                    revision=f"{entry.revision}+random-init(seed={seed})",
                    legacy_revision=entry.legacy_revision
                    and f"{entry.legacy_revision}+random-init(seed={seed})",
                )
            )
    labels = [e.label for e in out]
    if len(set(labels)) != len(labels):
        raise LoadError(f"a model is named twice: {labels}")
    return out


def _check_attention(entry: ModelEntry) -> None:
    """Every command that loads a Falcon-ALiBi fits its logits, which are read where its
    sdpa attention forms them (:mod:`posgen.harness.model_side.alibi.falcon_sdpa`): another
    attention implementation is refused here, before it loads."""
    attention = entry.attn_implementation
    family = None if attention in (None, "sdpa") else family_of_folder(entry.path)
    if family is not None and family.bias_form == "falcon":
        raise LoadError(
            f"--attn-implementation {attention}: Falcon-ALiBi's logits are read where its sdpa "
            "attention forms them (on transformers 5.24 its eager attention adds the bias "
            "twice); load it with sdpa, the default"
        )


def _entry(name: str, label: str, revision: str | None) -> ModelEntry:

    if embedded.is_embedded_alias(name):
        if revision:
            raise LoadError(
                f"--revision {revision}: the embedded model has one version (its installed "
                "package); drop --revision"
            )
        try:
            return ModelEntry("embedded", "embedded", True, embedded.embedded_revision())
        except FileNotFoundError as e:
            raise LoadError(str(e)) from None
    path = _local_or_hub(name)
    if Path(path).is_dir():
        if revision:
            raise LoadError(
                f"--revision {revision}: {name} is a local folder, which has no revisions "
                "(--revision picks a hub model's branch, tag or commit); drop --revision"
            )
        folder = Path(path)
        entry = ModelEntry(
            label,
            path,
            False,
            content_revision(folder),
            legacy_revision=legacy_revision(folder),
        )
    else:
        entry = ModelEntry(label, path, False, _hub_commit(name, revision))
    positions = position_kind(path)
    return replace(
        entry, rope=positions == "rotary" and has_rotary_embedding(path), positions=positions
    )


def position_kind(path: str) -> str:
    """Where a local model's positions enter, from its config.json
    (:mod:`posgen.harness.position_family`): ``rotary`` (also for a hub id, whose config is
    read when it loads), ``absolute``, ``alibi``, ``none``, or ``unadapted`` for an ALiBi
    attention whose logits the commands do not fit (a family registered with a
    ``logits_refusal``: hf-posgen moves its positions, but ``logits=`` and the fit of the
    logits do not run on it; BLOOM's, MPT's and Falcon's are ``alibi``)."""

    family = family_of_folder(path)
    if family is None:
        return "rotary"
    return "unadapted" if family.refusal or family.logits_refused else family.kind


def require_rope(entry: ModelEntry, command: str) -> None:
    """Refuse a model whose config has no rotary position embedding."""
    if not entry.rope:
        raise LoadError(
            f"{entry.path} has no rotary position embedding (its config.json has no rope_* "
            f"or rotary setting); {command} measures RoPE models only"
        )


def has_rotary_embedding(path: str) -> bool:
    """Whether a local model's config.json describes rotary position embeddings (a
    ``rope_*`` or ``*rotary*`` setting, as transformers writes for every RoPE family);
    True for a hub id, whose config is not read here (loading then checks)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return True
    keys = json.loads(config.read_text(encoding="utf-8"))
    return any("rope" in k or "rotary" in k for k in keys)


def _local_or_hub(name: str) -> str:
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise LoadError(f"{path} has no config.json: not a Hugging Face model folder")
        _check_model_config(path / "config.json")
        return str(path.resolve())
    if path.exists() or name.startswith((".", "/", "~")) or not HUB_ID.match(name):
        raise LoadError(
            f"model {name!r}: no such model folder (and not a hub id like "
            "'org/name'); pass a local folder, a hub id or 'embedded'"
        )
    return name


def _check_model_config(path: Path) -> None:
    """A model folder's config.json must say which architecture transformers builds."""
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LoadError(f"{path} is not readable JSON ({e}); fix or re-download it") from None
    if not isinstance(cfg, dict) or not cfg.get("model_type"):
        raise LoadError(
            f"{path} has no model_type, so transformers cannot tell which architecture to "
            'build; add it (e.g. "model_type": "llama") or re-download the model'
        )


def _hub_commit(name: str, revision: str | None) -> str:
    """A hub id's resolved commit (the hub, else the local cache)."""

    try:
        return resolve_commit(name, revision)
    except HubModelError as e:
        raise LoadError(str(e)) from None
