"""Run by the serving image from a ConfigMap (standard library only): the entry step and the loopback S3
endpoint it serves a node's weights copy from. The node agent imports their record format."""
