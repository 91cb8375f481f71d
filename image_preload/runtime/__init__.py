"""Runtime code of the image preload: the rollout gate (`gate.py`) and the image snapshot build (`snapshot/`)."""
