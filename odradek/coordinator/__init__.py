"""Coordinators: pure state machines whose state is records in internal topics (see docs/coordinator.md)."""
