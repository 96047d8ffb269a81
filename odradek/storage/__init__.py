"""Storage: partition logs, segments, indexes and checkpoint files. No networking."""
