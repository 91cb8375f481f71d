"""One served model's workload: `construct.py` applies it through the cluster (CDK), `chart.py` is the vLLM
workload (cdk8s), `runtime/` the standard-library entry step the vLLM pods run in front of vLLM."""
