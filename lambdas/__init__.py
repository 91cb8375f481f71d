"""AWS Lambda functions of warmstart (deployed from source: no bundling, no Docker)."""
