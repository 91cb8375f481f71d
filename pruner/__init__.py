"""The compile-cache pruner: `construct.py` (the scheduled Lambda, its active set and alarms) and `runtime/`
(the function's code)."""
