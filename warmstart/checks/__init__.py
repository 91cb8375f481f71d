"""Rules that span several fields or need the GPU catalog, one module per topic.

Each rule returns Problems (field path, what is wrong, how to fix it); `load_config` refuses a file with any. They
exist because every one of these mistakes would otherwise deploy and silently lose a speed-up (or fail only on the
GPU node, minutes into a scale-up). A rule declares what it needs before it runs (warmstart/checks/rule.py);
`environment.check_environment` runs them all. This file imports nothing: `warmstart/problem.py` imports
`checks/fix.py`, and the config model below every rule imports `problem`; running the rules' imports from here would
reach it again.
"""
