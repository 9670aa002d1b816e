"""posgen.results."""
