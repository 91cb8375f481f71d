"""Stand-in package: only what `python3 -m vllm.entrypoints.openai.api_server` needs (tests/standins/vllm.py)."""
