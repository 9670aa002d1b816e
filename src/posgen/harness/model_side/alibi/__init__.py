"""ALiBi models (BLOOM, MPT, Falcon-ALiBi): their bias replaced per row, their logits read
and replaced where their attention forms them."""
