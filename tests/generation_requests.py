"""generate_until requests and the rotary inputs of a generation, for the tests of
generation under a perturbation."""

from __future__ import annotations

import torch
from lm_eval.api.instance import Instance

from posgen.harness.model_family import rotary_modules
from tiny_models import training_text

# Four contexts of different lengths, so a batch of 4 is left-padded.
PROMPTS = [t[: 30 + 41 * i] for i, t in enumerate(training_text()[20:24])]


def requests(prompts: list[str], new_tokens: int = 8, **gen_kwargs) -> list[Instance]:
    """One greedy generate_until request per prompt (``gen_kwargs`` override)."""
    kwargs = {"until": [], "max_gen_toks": new_tokens, "do_sample": False, **gen_kwargs}
    return [Instance("generate_until", None, (p, dict(kwargs)), i) for i, p in enumerate(prompts)]


def generate(lm, batch_size: int = 4, prompts=PROMPTS, **kwargs) -> list[str]:
    """``lm.generate_until`` (lm-eval's own batching) at ``batch_size``."""
    lm.batch_size_per_gpu = batch_size
    return lm.generate_until(requests(prompts, **kwargs), disable_tqdm=True)


def rotary_inputs(model, monkeypatch) -> list[torch.Tensor]:
    """Filled with the position values the model's rotary embedding computes from, one
    ``[B, T]`` tensor per forward (after any hook replaced them)."""
    seen: list[torch.Tensor] = []
    (rotary,) = rotary_modules(model)
    original = rotary.forward

    def spy(x, position_ids, *args, **kwargs):
        seen.append(position_ids.detach().clone())
        return original(x, position_ids, *args, **kwargs)

    monkeypatch.setattr(rotary, "forward", spy)
    return seen


def greedy_rows(lm, new_tokens: int = 8) -> tuple[list[list[int]], list[list[int]]]:
    """Each prompt's context tokens and its greedy generation at batch 4 (up to EOS)."""
    context, mask = lm.tok_batch_encode(PROMPTS)
    out = lm._model_generate(
        context, context.shape[1] + new_tokens, [], attention_mask=mask, do_sample=False
    )
    contexts, generated = [], []
    for b, n in enumerate(mask.sum(dim=1).tolist()):
        contexts.append(context[b, context.shape[1] - n :].tolist())
        row = out[b, context.shape[1] :].tolist()
        eos = lm.tokenizer.eos_token_id
        generated.append(row[: row.index(eos) + 1] if eos in row else row)
    return contexts, generated
