"""What crosses a process boundary: the agent image, the Lambda functions, the vLLM pods and synth all read or
write these, so each is defined once, here.

The cache key and its S3 layout, the active set's format, pod labels and container names, the node folders'
layout, the agent's settings, the start records and the vLLM entry step's record. This package imports only the
standard library and pydantic, never the domain package (`warmstart`), so the agent image and the Lambda assets
ship it alone: a change to a refusal message or a default does not rebuild or redeploy them
(tests/unit/test_import_rules.py holds it so).
"""
