"""Every intervention on a model's forward, in rooms by mechanism, behind one door.

- ``positions/``: the plan of a forward (``plan.py``: each row's positions and noise from
  its real tokens), where planned positions enter a rotary model (``rotary.py``), chosen
  layers and heads only (``layers.py``, ``selection.py``), a learned table or an ALiBi
  bias (``non_rotary.py``);
- ``alibi/``: what an ALiBi block is handed, replaced per row (``rows.py``), its logits
  where BLOOM's and MPT's attention forms them (``bias.py``) and at Falcon's sdpa call
  (``falcon_sdpa.py``), ``logits=`` there (``logits.py``) and their capture
  (``capture.py``);
- ``attention/``: posgen's attention functions behind one wrapper (``wrapper.py``): qk
  noise, Λ, InfLLM and their shared re-rotation, the length schemes' entry point
  (``length.py``);
- ``logits/``: the capture of every layer's logits from the model's own forward
  (``capture.py``, ``layer_mask.py``), and ``logits=``: the forms, the replacement and
  the rows it replaces (``forms.py``, ``replacement.py``, ``rows.py``);
- ``prefix_reuse.py``: the plain forward's layer outputs replayed below the first
  perturbed layer; ``perturbation.py``: what a run puts on the model.
"""
