"""The one validated configuration model of an environment (`environment.EnvironmentConfig`), one module per
section: `network`, `cluster`, `compute`, `models`, `caches` (and image preload), `operations` (buckets, access,
alerts, pruning, deploy), and what they share (`base`). Import each name from its section's module."""
