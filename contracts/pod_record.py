"""The record each vLLM container's entry step writes into its own folder on the node (what weights it chose, the
compile folders it found), read by the node agent. The entry step runs alone in the serving image, from a
ConfigMap, so it keeps its own copy of these two names; tests/unit/test_import_rules.py holds them equal."""

from __future__ import annotations

# 2: the record is `record.json` in the pod's own folder (kubelet names it after the pod's UID), no identity inside.
RECORD_VERSION = 2
RECORD_FILE = "record.json"
