"""Image rollout gate: holds a model's rollout to a new serving image until that image's pre-pull DaemonSet
has it on every GPU node it targets, or until a deadline; it never blocks a rollout for longer.

It runs as a Job (one per serving image) that `cdk deploy` waits for before it updates the Deployments of
that image, so on existing nodes the new pods start with the image already on disk. Whatever happens (the
DaemonSet not ready in time, the API unreachable) it exits 0 at the deadline with the outcome in its log:
the rollout then goes ahead and a pod that lands on a node without the image pulls it as usual.

DaemonSet status fields as the apps/v1 controller sets them (Kubernetes 1.35, pkg/controller/daemon):
`desiredNumberScheduled` counts the nodes that should run the pod, `updatedNumberScheduled` those running the
current template, `numberReady` those whose pod is Ready; `observedGeneration` says the status is about the
current spec. The pre-pull pod becomes Ready only after its init container (the serving image) has run,
that is, after the kubelet pulled the image.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from node_agent.runtime.kube import InClusterTransport, KubeApi
from node_agent.runtime.log import EventLog


@dataclass(frozen=True)
class Progress:
    desired: int
    updated: int
    ready: int
    observed_current: bool

    @property
    def complete(self) -> bool:
        """Every node the DaemonSet targets runs its current pod, and each pod is Ready (image on disk)."""
        return self.observed_current and self.updated == self.desired and self.ready >= self.desired

    @classmethod
    def of(cls, daemon_set: dict) -> Progress:
        status = daemon_set.get("status", {})
        generation = daemon_set.get("metadata", {}).get("generation", 0)
        return cls(
            desired=status.get("desiredNumberScheduled", 0),
            updated=status.get("updatedNumberScheduled", 0),
            ready=status.get("numberReady", 0),
            observed_current=status.get("observedGeneration", -1) >= generation,
        )


def await_image(
    read: Callable[[], dict],
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    deadline_seconds: float,
    poll_seconds: float,
    log: EventLog,
) -> str:
    """Polls the DaemonSet until it is complete or the deadline passes; returns the outcome, never raises."""
    start = clock()
    last: Progress | None = None
    error: str | None = None
    while True:
        try:
            last = Progress.of(read())
            error = None
            if last.complete:
                log.event(
                    "image-gate",
                    outcome="ready",
                    desired=last.desired,
                    ready=last.ready,
                    waited_s=round(clock() - start, 1),
                )
                return "ready"
        except Exception as exc:  # API unreachable or the object not there yet: retried until the deadline
            error = f"{type(exc).__name__}: {exc}"
        if clock() - start + poll_seconds > deadline_seconds:
            break
        sleep(poll_seconds)
    outcome = "api-error" if error else "deadline"
    fields = {"desired": last.desired, "ready": last.ready, "updated": last.updated} if last else {}
    log.event("image-gate", outcome=outcome, waited_s=round(clock() - start, 1), reason=error, **fields)
    return outcome


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m image_preload.runtime.gate", description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--daemon-set", required=True)
    parser.add_argument("--deadline-seconds", type=float, required=True)
    parser.add_argument("--poll-seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    if args.deadline_seconds <= 0 or args.poll_seconds <= 0:
        parser.error("--deadline-seconds and --poll-seconds must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    kube = KubeApi(InClusterTransport(os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]))
    await_image(
        lambda: kube.daemon_set(args.namespace, args.daemon_set),
        clock=time.monotonic,
        sleep=time.sleep,
        deadline_seconds=args.deadline_seconds,
        poll_seconds=args.poll_seconds,
        log=EventLog(time.time),
    )
    return 0  # the outcome is in the log: the rollout goes ahead either way


if __name__ == "__main__":
    sys.exit(main())
