"""Rates and the limits built on them (replication throttles now; client quotas later)."""
