"""The torch.compile cache key: one pure function, used by synth, `warmstart plan` and the node agent.

Two configurations share a key only if their compiled kernels are interchangeable:
same GPU (by name: PyTorch Inductor's key, which vLLM's compile hash holds, names the device, so an H100 and an
H200 never share one although both are sm_90) and architecture, parallel sizes, model identity, serving image and
PyTorch, and every vLLM setting that enters vLLM's own compile hash. The S3 layout stays readable by a person:

    compile-cache/<model>/<gpu>-<sm_xx>/tp<N>-pp<M>/torch<version>/<digest>/
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

KEY_ROOT = "compile-cache"
MANIFEST_STEM = "manifest-"
ARCHIVE_STEM = "archive-"
# The most of a manifest any reader takes (the agent's restore, the pruner): any node can write one, and a real one
# (an archive's name, checksum, factors and hash folders) is a few kilobytes.
MANIFEST_MAX_BYTES = 2**20
# The most files a compile cache may hold (agents refuse an archive or manifest beyond it; the pruner takes no
# manifest claiming more as a fuller one).
MAX_CACHE_FILES = 200_000
# The pruner's one-run-at-a-time lock: outside KEY_ROOT, so never listed as a key nor create-only.
PRUNER_LOCK_KEY = "pruner-lock.json"
DIGEST_LENGTH = 20  # hex characters of sha256: 80 bits, collisions are not a practical concern


@dataclass(frozen=True)
class ModelFactors:
    """Everything about a model's deployment that the compiled kernels depend on, except the GPU."""

    model: str
    weights_revision: str
    image: str
    torch_version: str
    tensor_parallel: int
    pipeline_parallel: int
    max_model_len: int
    max_num_batched_tokens: int | None
    dtype: str
    quantization: str | None
    kv_cache_dtype: str
    compilation_config: dict[str, Any] | None
    vllm_env: dict[str, str] = field(default_factory=dict)

    def canonical(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    def fingerprint(self) -> str:
        """Short digest of the GPU-independent factors: names the node-local cache folder of a config."""
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelFactors:
        return cls(**data)


@dataclass(frozen=True)
class CompileCacheKey:
    prefix: str  # S3 key prefix, ends with "/"
    digest: str
    factors: dict[str, Any]

    @property
    def manifest_prefix(self) -> str:
        return f"{self.prefix}{MANIFEST_STEM}"

    def manifest_key(self, hash_dirs: list[str], content: str | None = None) -> str:
        """Manifests are written once and never replaced (the bucket policy allows creating them only): the first
        one of a set of vLLM hash folders is named by the folders (as agents before file digests name and read
        it), a fuller one also by the files it holds (`content`, the digest of the archive's file names), so a
        node whose vLLM made a folder or a file the published cache lacks adds a manifest instead of overwriting
        one."""
        return f"{self.manifest_prefix}{manifest_digest(hash_dirs, content)}.json"

    def names_manifest(self, name: str, hash_dirs: list[str], content: str | None) -> bool:
        """Whether `name` is what a manifest of these folders (and files) is stored under in this key."""
        return name.startswith(self.manifest_prefix) and manifest_named(name, hash_dirs, content)

    @property
    def last_use_key(self) -> str:
        return f"{self.prefix}last-use.json"

    def archive_key(self, sha256: str, nonce: str) -> str:
        """Named by content and by upload: concurrent publishers never overwrite each other's bytes, and a
        republish of identical bytes gets a name no pruner listed before (it only deletes names it listed)."""
        return f"{self.prefix}{ARCHIVE_STEM}{sha256}-{nonce}.tar.zst"

    def names_archive(self, archive: str, sha256: str) -> bool:
        """Whether `archive` is an upload of these bytes under this key."""
        pattern = re.escape(f"{self.prefix}{ARCHIVE_STEM}{sha256}-") + r"[0-9a-f]{8,32}\.tar\.zst"
        return re.fullmatch(pattern, archive) is not None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def compile_cache_key(factors: ModelFactors, *, gpu: str, architecture: str) -> CompileCacheKey:
    everything = {"gpu": gpu, "architecture": architecture, **json.loads(factors.canonical())}
    digest = hashlib.sha256(json.dumps(everything, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    prefix = (
        f"{KEY_ROOT}/{factors.model}/{_slug(gpu)}-{architecture}/"
        f"tp{factors.tensor_parallel}-pp{factors.pipeline_parallel}/torch{_slug(factors.torch_version)}/"
        f"{digest[:DIGEST_LENGTH]}/"
    )
    return CompileCacheKey(prefix=prefix, digest=digest[:DIGEST_LENGTH], factors=everything)


KEY_PATTERN = re.compile(
    rf"^{KEY_ROOT}/(?P<model>[a-z0-9-]+)/(?P<gpu>[a-z0-9.-]+)-(?P<arch>sm_\d+)/tp(?P<tp>\d+)-pp(?P<pp>\d+)/"
    rf"torch(?P<torch>[a-z0-9.-]+)/(?P<digest>[0-9a-f]{{{DIGEST_LENGTH}}})/"
)


def manifest_digest(hash_dirs: list[str], content: str | None = None) -> str:
    named: list = sorted(hash_dirs) if content is None else [sorted(hash_dirs), content]
    return hashlib.sha256(json.dumps(named).encode()).hexdigest()[:16]


def manifest_named(name: str, hash_dirs: list[str], content: object) -> bool:
    """Whether a manifest object's name is one its hash folders give, alone or with its file digest (either form:
    the first manifest of a set of folders is named by them alone)."""
    stem = name.rsplit("/", 1)[-1].removeprefix(MANIFEST_STEM).removesuffix(".json")
    return stem in {
        manifest_digest(hash_dirs),
        *([manifest_digest(hash_dirs, content)] if isinstance(content, str) else []),
    }


def counts_fit(counts: object, hash_dirs: list[str], files: int) -> bool:
    """A manifest's files per hash folder: only folders it holds, whole counts, no more files in all than it has."""
    return (
        isinstance(counts, dict)
        and all(d in hash_dirs and isinstance(n, int) and not isinstance(n, bool) and n >= 0 for d, n in counts.items())
        and sum(counts.values()) <= files
    )


def holds_more(mine: dict[str, int], theirs: dict[str, int]) -> bool:
    """Whether `mine` holds more files than `theirs` in some hash folder: an archive that does not is covered by
    one holding every folder of it."""
    return any(count > theirs.get(folder, 0) for folder, count in mine.items())


def parse_key_prefix(object_key: str) -> str | None:
    """The key prefix an S3 object belongs to, or None when the object is not under a well-formed key."""
    match = KEY_PATTERN.match(object_key)
    return match.group(0) if match else None
