"""The agent's liveness covers every loop, and its metrics endpoint holds a burst of scrapes."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from node_agent.runtime.__main__ import repeat
from node_agent.runtime.liveness import Liveness, keep_heartbeat
from node_agent.runtime.log import EventLog
from node_agent.runtime.metrics import AgentMetrics
from tests.agent.cluster_world import MODEL


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_burst_of_a_thousand_scrapes_is_answered_in_full():
    """The P2: 1,000 concurrent scrapes lost 2 (the listen backlog of 5 overflowed)."""
    metrics = AgentMetrics()
    metrics.refused("pod-record")
    port = _free_port()
    server = metrics.serve(port, address="127.0.0.1")
    try:

        def scrape(_):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
                return answer.status == 200 and b"warmstart_untrusted_inputs_refused_total" in answer.read()

        with ThreadPoolExecutor(max_workers=200) as pool:
            answers = list(pool.map(scrape, range(1000)))
        assert all(answers)
    finally:
        server.shutdown()


def test_a_stuck_loop_stops_the_heartbeat_while_the_others_go_on(tmp_path):
    """The P1: a loop that raised on every round kept the heartbeat going (only the compile loop beat it); one
    blocked on a silent endpoint was never noticed. Now every loop beats, and the heartbeat stops once any one has
    not beaten for its period plus the stall bound."""
    liveness = Liveness(stall_seconds=0.5)
    stop, blocked, rounds = threading.Event(), threading.Event(), []
    log = EventLog(time.time, stream=open("/dev/null", "w"))

    def weights_tick():  # blocks like a call to an endpoint that never answers
        blocked.wait()

    def tick():
        rounds.append(time.monotonic())

    repeat(tick, 0.05, stop=stop, log=log, liveness=liveness)
    repeat(weights_tick, 0.05, stop=stop, log=log, liveness=liveness)
    heartbeat, stuck = tmp_path / "alive", []
    keep_heartbeat(liveness, heartbeat, stop=stop, on_stuck=stuck.append, interval=0.05)
    try:
        time.sleep(0.3)
        assert heartbeat.exists() and not stuck
        time.sleep(1.0)
        assert stuck and stuck[-1] == ["weights_tick"]
        beaten = heartbeat.stat().st_mtime
        time.sleep(0.3)
        assert heartbeat.stat().st_mtime == beaten  # no beat while a loop is stuck
        assert len(rounds) > 10  # the compile loop went on all along
        blocked.set()
        time.sleep(0.3)
        assert heartbeat.stat().st_mtime > beaten  # it recovered: the probe passes again
    finally:
        blocked.set()
        stop.set()


def test_a_long_download_keeps_its_loop_alive_with_every_buffer(tmp_path, s3_server):
    """A weights download of many minutes is progress, not a stall: the loop beats with every buffer written."""
    from tests.agent.cluster_world import make_world

    world = make_world(s3_server, tmp_path)
    node = world.node("node-a")
    clock = [0.0]
    node.agent.liveness = liveness = Liveness(clock=lambda: clock[0], stall_seconds=10)
    liveness.register("weights_tick", 30)
    beats = []
    original = liveness.beat

    def counting(loop: str) -> None:
        clock[0] += 1
        beats.append(loop)
        original(loop)

    liveness.beat = counting
    assert node.agent.weights_tick()[MODEL] == "downloaded"
    assert beats.count("weights_tick") >= 3  # one per buffer of the download
    assert liveness.stuck() == []


def test_half_open_scrapers_take_a_bounded_number_of_threads_and_a_scrape_still_answers():
    """Issue 45: 3,000 half-open requests made 2,654 threads. Past the cap a connection is refused or takes the
    slot of one that has waited longest for its request; every connection ends within its stated time."""
    metrics = AgentMetrics()
    port = _free_port()
    server = metrics.serve(port, address="127.0.0.1", max_connections=16)
    before = threading.active_count()
    try:
        silent = []
        for _ in range(300):
            connection = socket.create_connection(("127.0.0.1", port), timeout=5)
            connection.sendall(b"GET /metrics HTTP/1.1\r\n")  # a request line, its headers never ending
            silent.append(connection)
        time.sleep(1.2)
        assert threading.active_count() - before <= 16 + 1  # a thread per slot, and the guard's deadline thread
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
            assert answer.status == 200
        for connection in silent:
            connection.close()
    finally:
        server.shutdown()
