"""What every warmstart Lambda function ships beside its own runtime: the one-JSON-line log (`log.py`). How the
code is packaged at synth is the construct kit's (`construct_kit/lambda_packaging.py`); each function's own
runtime lives in its component folder (`pruner/runtime/`, `image_preload/runtime/snapshot/`)."""
