"""The node agent process (`python -m node_agent.runtime`): thin `__main__`, pure logic with the clock and
clients passed in, the `s3` package the only code that talks to botocore."""
