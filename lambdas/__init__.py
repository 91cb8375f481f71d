"""What every warmstart Lambda function shares: how its code is packaged from the repository's own source
(`packaging.py`, used by the constructs at synth) and its one-JSON-line log (`log.py`, shipped with each
function). Each function's own runtime lives in its component folder (`pruner/runtime/`,
`image_preload/runtime/snapshot/`)."""
