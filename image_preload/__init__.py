"""Serving images on GPU nodes before their pods need them: `prepull.py` and `prepull_chart.py` (prepull
DaemonSets and their rollout gates), `snapshot.py` (the image snapshot nodes' data volumes start from), and
`runtime/` (the gate, run from the agent image; the snapshot's custom-resource Lambda and pull script)."""
