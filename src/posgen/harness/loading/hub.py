"""A hub model's commit, resolved before anything loads: what a run records, never ``main``.

The hub is asked first (``HfApi.model_info``); when it cannot be reached (or
``HF_HUB_OFFLINE=1``), the local Hugging Face cache answers for models downloaded
before. A model that neither knows is refused with what to do.
"""

from __future__ import annotations

from pathlib import Path


class HubModelError(ValueError):
    """A hub id that cannot be resolved to a commit; the message says what to do."""


def resolve_commit(repo_id: str, revision: str | None = None, timeout: float = 10.0) -> str:
    """The 40-hex commit of ``repo_id`` at ``revision`` (default branch when None)."""
    from huggingface_hub import HfApi, constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    at = f" at revision {revision!r}" if revision else ""
    remote_error = "HF_HUB_OFFLINE is set"
    if not constants.HF_HUB_OFFLINE:
        try:
            sha = HfApi().model_info(repo_id, revision=revision, timeout=timeout).sha
            if sha:
                return sha
        except GatedRepoError:
            raise HubModelError(
                f"model {repo_id!r} is gated: accept its terms on the hub and log in "
                "(`hf auth login`)"
            ) from None
        except RevisionNotFoundError:
            raise HubModelError(f"model {repo_id!r} has no revision {revision!r}") from None
        except RepositoryNotFoundError:
            raise HubModelError(
                f"model {repo_id!r}: no such model on the Hugging Face hub (or it is private: "
                "log in with `hf auth login`)"
            ) from None
        except Exception as exc:  # network down, proxy, timeout: the cache may still know it
            remote_error = f"{type(exc).__name__}: {exc}"
    try:
        folder = snapshot_download(
            repo_id, revision=revision, local_files_only=True, allow_patterns=["config.json"]
        )
    except (LocalEntryNotFoundError, OSError, ValueError):
        raise HubModelError(
            f"model {repo_id!r}{at}: the Hugging Face hub cannot be reached ({remote_error}) "
            "and the model is not in the local cache; download it where the hub is "
            "reachable, or pass a local folder"
        ) from None
    return Path(folder).name  # snapshots/<commit>
