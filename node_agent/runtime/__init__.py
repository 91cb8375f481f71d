"""The node agent process (`python -m node_agent.runtime`): thin `__main__`, pure logic with the clock and
clients passed in, `s3_store.py` the one module that talks to boto3."""
