"""Records the EKS-optimized AL2023 AMI releases, and which Kubernetes minors each ships a GPU image for, into
warmstart/node_os/al2023_releases.json, from a clone of awslabs/amazon-eks-ami (a bare one will do):

    git clone --bare https://github.com/awslabs/amazon-eks-ami
    python -m tests.upstream.record_al2023 amazon-eks-ami.git

- The releases are the repository's tags `v<YYYYMMDD>` (each is an AMI release; EKS names the AMIs after them).
- A release's Kubernetes minors are those whose x86_64 NVIDIA AMI (`amazon-eks-node-al2023-x86_64-nvidia-<minor>-
  <release>`, the image Karpenter resolves for a GPU node) its CHANGELOG.md section lists; a tag whose section the
  changelog does not have yet records `null` (not known).
The table is exact up to the newest tag: warmstart refuses a release the tags do not have and a minor a release is
known not to ship, and takes a newer release with a note (warmstart/node_os/al2023.py).
"""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import sys
from pathlib import Path

TABLE = Path(__file__).resolve().parents[2] / "warmstart" / "node_os" / "al2023_releases.json"
# AL2023 GPU AMIs exist from 2024 on (the accelerated AL2023 AMIs' first releases); earlier tags are AL2's.
FIRST_YEAR = "v2024"
SECTION = re.compile(r"^# AMI Release (v\d{8})\s*$", re.MULTILINE)
GPU_IMAGE = "amazon-eks-node-al2023-x86_64-nvidia-(\\d+\\.\\d+)-{release}"


def git(repository: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repository), *args], capture_output=True, text=True, check=True).stdout


def record(repository: Path) -> dict:
    tags = sorted(t for t in git(repository, "tag", "--list", "v20*").split() if re.fullmatch(r"v\d{8}", t))
    changelog = git(repository, "show", "HEAD:CHANGELOG.md")
    sections = {}
    marks = list(SECTION.finditer(changelog))
    for mark, following in zip(marks, [*marks[1:], None], strict=True):
        body = changelog[mark.end() : following.start() if following else len(changelog)]
        pattern = re.compile(GPU_IMAGE.format(release=re.escape(mark.group(1))))
        sections[mark.group(1)] = sorted(set(pattern.findall(body)), key=lambda m: tuple(map(int, m.split("."))))
    head, when = git(repository, "log", "-1", "--format=%H %cI").split()
    return {
        "source": f"awslabs/amazon-eks-ami at {head[:8]} ({when[:10]}): tags v<YYYYMMDD>, CHANGELOG.md sections "
        "(the amazon-eks-node-al2023-x86_64-nvidia-<minor>-<release> AMIs each lists)",
        "recorded": datetime.date.today().isoformat(),
        "releases": {tag: sections.get(tag) for tag in tags if tag >= FIRST_YEAR},
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    table = record(Path(args[0]))
    TABLE.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {TABLE}: {len(table['releases'])} releases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
