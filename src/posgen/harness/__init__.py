"""posgen.harness."""
