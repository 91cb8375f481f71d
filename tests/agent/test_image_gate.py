"""The image rollout gate: it waits for the prepull DaemonSet of a new image, bounded, and never fails.

The DaemonSet below evolves its status the way the apps/v1 controller does (Kubernetes 1.35,
pkg/controller/daemon): `observedGeneration` catches up with `metadata.generation` first, `desiredNumberScheduled`
counts the GPU nodes, and a node's pod counts in `numberReady` only once its init container (the serving image)
has run, that is once the kubelet pulled the image."""

import io
import json

import pytest

from image_preload.runtime.gate import Progress, await_image, parse_args
from node_agent.runtime.kube import KubeApi
from node_agent.runtime.log import EventLog
from tests.agent.fake_kube import FakeCluster

NAMESPACE, NAME = "warmstart-system", "image-cache-0123456789ab"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class PrePull:
    """A new prepull DaemonSet on `nodes` GPU nodes whose image pulls finish at the given times."""

    def __init__(
        self, cluster: FakeCluster, clock: Clock, pulled_at: list[float], *, observed_after: float = 5
    ) -> None:
        self.cluster, self.clock, self.pulled_at, self.observed_after = cluster, clock, pulled_at, observed_after
        self.update()

    def update(self) -> None:
        observed = self.clock.now >= self.observed_after
        status = {"observedGeneration": 1 if observed else 0}
        if observed:
            ready = sum(t <= self.clock.now for t in self.pulled_at)
            status |= {
                "desiredNumberScheduled": len(self.pulled_at),
                "currentNumberScheduled": len(self.pulled_at),
                "updatedNumberScheduled": len(self.pulled_at),
                "numberReady": ready,
                "numberAvailable": ready,
                "numberUnavailable": len(self.pulled_at) - ready,
            }
        self.cluster.daemon_sets[(NAMESPACE, NAME)] = {"metadata": {"name": NAME, "generation": 1}, "status": status}


def run_gate(cluster: FakeCluster, clock: Clock, prepull: PrePull | None, deadline: float) -> tuple[str, list[dict]]:
    stream = io.StringIO()
    api = KubeApi(cluster)

    def read() -> dict:
        if prepull:
            prepull.update()
        return api.daemon_set(NAMESPACE, NAME)

    outcome = await_image(
        read, clock=clock, sleep=clock.sleep, deadline_seconds=deadline, poll_seconds=10, log=EventLog(clock, stream)
    )
    return outcome, [json.loads(line) for line in stream.getvalue().splitlines()]


def test_the_gate_opens_once_every_gpu_node_has_pulled_the_image():
    cluster, clock = FakeCluster(), Clock()
    prepull = PrePull(cluster, clock, pulled_at=[95.0, 240.0, 180.0])
    outcome, events = run_gate(cluster, clock, prepull, deadline=600)
    assert outcome == "ready"
    assert 240 <= clock.now < 250  # the first poll after the slowest node's pull
    assert events[-1] | {"time": 0} == {
        "time": 0,
        "event": "image-gate",
        "outcome": "ready",
        "desired": 3,
        "ready": 3,
        "waited_s": clock.now,
    }
    assert cluster.requests[0].path == f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{NAME}"


def test_a_status_for_the_previous_spec_is_not_taken_as_ready():
    # Right after the apply the controller has not observed the new DaemonSet: no counts, or stale ones.
    stale = {
        "metadata": {"generation": 2},
        "status": {"observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberReady": 2},
    }
    assert not Progress.of(stale).complete
    assert not Progress.of({"metadata": {"generation": 1}, "status": {}}).complete


def test_no_gpu_node_means_nothing_to_wait_for():
    cluster, clock = FakeCluster(), Clock()
    prepull = PrePull(cluster, clock, pulled_at=[], observed_after=0)
    assert run_gate(cluster, clock, prepull, deadline=600)[0] == "ready"
    assert clock.now == 0


def test_the_wait_ends_at_the_deadline_and_says_how_far_it_got():
    cluster, clock = FakeCluster(), Clock()
    prepull = PrePull(cluster, clock, pulled_at=[30.0, 10_000.0])  # one node never finishes in time
    outcome, events = run_gate(cluster, clock, prepull, deadline=300)
    assert outcome == "deadline"
    assert clock.now <= 300
    assert events[-1]["outcome"] == "deadline" and events[-1]["ready"] == 1 and events[-1]["desired"] == 2


def test_an_unreachable_api_or_a_missing_daemon_set_is_retried_then_let_go():
    cluster, clock = FakeCluster(), Clock()  # no DaemonSet: 404 on every read
    outcome, events = run_gate(cluster, clock, None, deadline=60)
    assert outcome == "api-error"
    assert len(cluster.requests) == 7  # t = 0, 10, ..., 60: the last read at the deadline, none after it
    assert "404" in events[-1]["reason"]


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--namespace=x", "--daemon-set=y", "--deadline-seconds=0"],
        ["--namespace=x", "--daemon-set=y", "--deadline-seconds=60", "--poll-seconds=-1"],
    ],
)
def test_bad_arguments_are_refused(argv):
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2


def test_arguments_as_the_job_passes_them():
    args = parse_args([f"--namespace={NAMESPACE}", f"--daemon-set={NAME}", "--deadline-seconds=600"])
    assert (args.namespace, args.daemon_set, args.deadline_seconds, args.poll_seconds) == (NAMESPACE, NAME, 600, 10)
