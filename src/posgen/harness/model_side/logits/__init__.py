"""Every layer's logits captured from the model's own forward, and ``logits=``: a layer's
logits replaced by their exact additive fit."""
