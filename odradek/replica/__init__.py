"""Replicas: partition roles, ISR, high watermark, follower fetching, delayed operations."""
