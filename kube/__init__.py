"""cdk8s charts: Kubernetes objects that warmstart renders (added to the cluster by the CDK stacks)."""
