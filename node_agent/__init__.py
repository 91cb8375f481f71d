"""The node agent: a DaemonSet on GPU nodes that keeps node-local caches warm (compile-cache restore and
publish, the node copy). `construct.py` deploys it (CDK), `chart.py` is its workload (cdk8s), `image.py`
builds its image, `runtime/` is the process itself."""
