"""How posgen loads a model: one loader for every command that reads weights.

``posgen run`` (its models through lm-eval's ``hf`` loading, its random-init twins),
``posgen length``, ``posgen decompose``, ``posgen layers`` and ``posgen run --length`` all
take a model as a :class:`~posgen.results.folder.config.ModelEntry` (path or hub id,
resolved revision, dtype, PEFT adapter, remote code, attention implementation, device
map) plus a device, built and loaded here. The API::

    add_loading_arguments(parser)          # --dtype --revision --trust-remote-code
                                           # --attn-implementation --peft --device-map --device
    options = LoadOptions.from_args(args)  # the flags, typed and checked
    entries = model_entries(["PATH"], options, random_init=True, seed=0)  # nothing loads
    device = check_device(args.device)     # None (CUDA when present) or a usable device
    loaded = load_model(entries[0], device, length=scheme)   # LoadedModel(model, tokenizer, record)
    tokenizer = load_tokenizer(entries[0])                    # no weights
    config = load_config(entries[0])                          # no weights
    position_limit(entries[0])             # (config field, value) bounding one forward, or None
    require_compatible(entries)            # compat.check() for these models, before any work
    hflm_kwargs(entry, device)             # the same entry as lm-eval's hf model arguments

Modules: ``options`` (the flags, devices), ``entries`` (model entries, revisions), ``hub``
(a hub model's commit), ``load`` (weights, config, tokenizer, twins). Every check raises
:class:`LoadError` (an :class:`~posgen.harness.input_error.InputError`: one line that says
what to do) before any weights load. ``LoadedModel.record`` is ``entry.to_dict()`` plus
the device and, for a length scheme applied at load (``dynamic``, ``yarn``), the
``from_pretrained`` rope settings it added. A PEFT adapter is loaded onto the model
(``PeftModel``) and its injected base model returned, so hooks see the usual module tree
with the adapter active.

Top-level imports stay light: torch, transformers and peft load inside the functions.
"""

from posgen.harness.loading.entries import has_rotary_embedding, model_entries, require_rope
from posgen.harness.loading.load import (
    LoadedModel,
    default_device,
    held_to_limit,
    hflm_kwargs,
    load_config,
    load_model,
    load_tokenizer,
    position_limit,
    random_init_twin,
    require_compatible,
)
from posgen.harness.loading.options import (
    LoadError,
    LoadOptions,
    add_loading_arguments,
    check_device,
    check_device_map,
)

__all__ = [
    "LoadError",
    "LoadOptions",
    "LoadedModel",
    "add_loading_arguments",
    "check_device",
    "check_device_map",
    "default_device",
    "has_rotary_embedding",
    "held_to_limit",
    "hflm_kwargs",
    "load_config",
    "load_model",
    "load_tokenizer",
    "model_entries",
    "position_limit",
    "random_init_twin",
    "require_compatible",
    "require_rope",
]
