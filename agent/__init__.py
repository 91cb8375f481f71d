"""warmstart node agent: runs in a DaemonSet on GPU nodes and keeps node-local caches warm."""
