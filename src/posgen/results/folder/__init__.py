"""The run folder: its versioned schema (file names, columns), the metric descriptions and
the rules they are scored by, the store that writes each finished cell atomically and reads
it back, the one-writer lock, and the short model labels that folder names and tables use."""
