"""The run folder: its versioned schema (file names, columns, metric rules), the store that
writes each finished cell atomically and reads it back, the one-writer lock, and the short
model labels that folder names and tables use."""
