"""posgen: measure how well a language model tolerates perturbed positions, and explain why."""

__version__ = "0.1.0"
