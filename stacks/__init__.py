"""CDK stacks of one warmstart environment; `compose.py` wires them."""
