"""posgen's attention functions behind one wrapper: qk noise, Λ and InfLLM."""
