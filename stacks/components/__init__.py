"""CDK constructs: every AWS resource of warmstart lives in one of these."""
