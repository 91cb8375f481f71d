"""The construct kit: CDK constructs that are infrastructure only (network, buckets, control plane, Pod Identity,
alarms, CI access) and the helpers every construct shares (cdk-nag acknowledgments, asset sources, Lambda
packaging, log retention). Components and stacks import it; it imports neither."""
