"""Host paths that reach the node's folders by a way `readOnly` does not close, as the host-path admission policy
(node_agent/host_path_policy.py, in CEL) and the existing-cluster preflight (warmstart_cli/host_root_mounts.py) read
them: regular expressions in the RE2 subset both CEL and Python accept."""

# /proc spellings of another folder: a process's root, working folder, open files (the links lead anywhere).
PROC_LINK = r"^/proc/[^/]+(/task/[^/]+)?/(root|cwd|fd|map_files)(/.*)?$"
# /proc folders that hold such links (a process's folder, its tasks): they expose the node's root too.
PROC_HOLDS_LINKS = r"^/proc(/([0-9]+|self|thread-self)(/task(/[0-9]+)?)?)?/?$"
# Capabilities that make a container the node's root whatever it mounts (Kubernetes passes the names as written;
# containerd accepts them with or without the CAP_ prefix).
ROOT_CAPABILITIES = ("SYS_ADMIN", "CAP_SYS_ADMIN", "ALL")


def with_aliases(roots: list[str]) -> list[str]:
    """The roots (each ending in '/') and the other host paths that name them: Bottlerocket's `/mnt` is its
    `/local/mnt` (the writable partition), so `/local` holds the array as `/` does."""
    aliases = ["/local" + root for root in roots if root.startswith("/mnt/")]
    return [*roots, *aliases]
