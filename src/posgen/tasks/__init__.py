"""posgen.tasks."""
