"""Deletes compile-cache keys that no environment's current models can produce and nobody used lately."""
