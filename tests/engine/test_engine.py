"""The real engine in the loop: vLLM's CPU build serves warmstart's rendered pods on three new nodes, and reuses the
compile cache warmstart restored (tests/engine/chain.py says what differs from a GPU node).

  node A  cold: nothing cached; the pod streams its weights from S3 and compiles; once it serves, A's agent
          publishes the compile cache
  node B  restored: B's agent restores A's cache before the pod starts
  node C  node copy: restored, and the weights served from C's node copy

Each start is judged by what the engine says and does: the cache folder it used, whether it rewrote a compiled
kernel, its own loaded / load-failure / compiled lines, the completion it answers, the compile phase's time; and
the agent's judgement of each start must be vLLM's."""

from __future__ import annotations

import pytest

from contracts.agent_settings import COMPILE_MISS_LABEL_DOMAIN, COMPILE_USE_LABEL_DOMAIN
from contracts.engine_caches import UNLISTED, Scope, named
from contracts.start_record import StartTimeline
from node_agent.runtime.archive import packable_files
from node_agent.runtime.compile_cache import Status
from node_agent.runtime.compile_judgement import Cause
from tests.engine.chain import Start, engine_caches_in, kernels
from warmstart_cli.status import render_starts

pytestmark = pytest.mark.engine


def _publishes(node) -> list[dict]:
    return [e for e in node.log.events if e["event"] == "publish"]


def test_a_cold_node_compiles_serves_and_publishes(chain):
    cold: Start = chain["cold"]
    assert chain["restore_a"] == Status.MISS
    assert cold.answer["choices"] and cold.answer["object"] == "text_completion"
    assert cold.vllm.compile_cache == "miss" and cold.vllm.load_failure is None
    assert cold.vllm.engine_seconds is not None  # the phase that holds the compile (CPU builds print no own line)
    assert cold.hash_dirs_before == [] and cold.hash_dirs_after
    assert kernels(cold.files_after), "vLLM compiled no kernel into the node's folder"
    assert [(e["event"], e["cause"], e["evidence"]) for e in cold.judged] == [
        ("compile-miss", "not-restored", "vllm-log")
    ]
    node = chain["cluster"].nodes["node-a"]
    assert [e["status"] for e in _publishes(node)] == [Status.PUBLISHED]


def test_a_new_node_restores_into_the_same_folder_and_rewrites_no_kernel(chain):
    cold, restored = chain["cold"], chain["restored"]
    assert chain["restore_b"] == Status.RESTORED
    assert restored.hash_dirs_before == cold.hash_dirs_after  # vLLM's own hash names the restored folder
    assert restored.hash_dirs_after == restored.hash_dirs_before  # and it made no other
    restored_kernels = kernels(restored.files_before)
    assert {p: sha for p, (_, sha) in restored_kernels.items()} == {
        p: sha for p, (_, sha) in kernels(cold.files_after).items()
    }
    assert not [p for p in restored.rewritten if p in restored_kernels], "vLLM rewrote a restored kernel"
    assert not kernels({p: restored.files_after[p] for p in restored.added}), "vLLM compiled a kernel anew"
    assert restored.answer["choices"]


def test_the_agent_reports_what_vllm_said_about_each_start(chain):
    """A start whose compiled graph vLLM could not load is a miss, whatever the folders say: the event carries
    vLLM's reason, the node's labels and the metric say so, and `warmstart status --starts` shows it."""
    cluster = chain["cluster"]
    for case in ("cold", "restored", "node_copy"):
        start: Start = chain[case]
        vllm_says = "miss" if (start.vllm.compile_cache == "miss" or start.vllm.load_failure) else "hit"
        (judged,) = start.judged
        assert judged["event"] == f"compile-{vllm_says}", (case, judged, start.vllm)
        assert judged["evidence"] == "vllm-log"
        node = cluster.nodes[start.node]
        labels = cluster.world.cluster.nodes[start.node]["metadata"]["labels"]
        assert labels[f"{COMPILE_USE_LABEL_DOMAIN}/{cluster.model.name}"] == vllm_says
        if start.vllm.load_failure:
            assert judged["cause"] == Cause.LOAD_FAILURE and start.vllm.load_failure in judged["reason"]
            assert labels[f"{COMPILE_MISS_LABEL_DOMAIN}/{cluster.model.name}"] == Cause.LOAD_FAILURE
            counted = node.agent.metrics.compile_use.labels(cluster.model.name, "miss", Cause.LOAD_FAILURE)._value.get()
            assert counted == 1
            (timeline,) = [StartTimeline.from_dict(t.to_dict()) for t in node.agent.starts.recent]
            assert timeline is not None and timeline.compile_load_failure == start.vllm.load_failure
            shown = render_starts(cluster.config, [timeline])
            assert "load failure:" in shown, shown


def test_vllms_cpu_build_cannot_load_its_aot_artifact_and_the_agent_says_so(chain):
    """The real case the judgement is held to: vLLM's CPU backend swaps in plain Inductor, whose loaded artifact
    lacks the method vLLM's loader calls; every start that finds the artifact compiles again (its kernels come from
    Inductor's cache). Should a CPU build fix it, this test says so, and the judgement tests above hold either way."""
    restored: Start = chain["restored"]
    assert restored.vllm.load_failure is not None, (
        f"vLLM {chain['version']}'s CPU build loaded its AOT artifact: the load-failure case needs another source"
    )
    assert "finalize_loading" in restored.vllm.load_failure
    assert restored.judged[0]["event"] == "compile-miss"


def test_a_restored_node_that_wrote_more_publishes_a_fuller_archive(chain):
    """What the restored node's vLLM added to the archive's files (here AOTAutograd's entry of its second compile)
    goes into a fuller archive, which the next node restores."""
    cluster, restored = chain["cluster"], chain["restored"]
    b_publishes = _publishes(cluster.nodes["node-b"])
    if not restored.added:
        assert b_publishes == []
        return
    assert [e["status"] for e in b_publishes] == [Status.REPUBLISHED]
    origin_c = chain["origin_c"]
    origin_b = cluster.nodes["node-b"].layout.origin(cluster.model.name, cluster.fingerprint)
    assert origin_c["manifest"] == origin_b["manifest"]  # node C took B's fuller archive
    assert origin_c["files"] == origin_b["files"] > origin_b_restored(chain)


def origin_b_restored(chain) -> int:
    """How many files the archive node B restored held (its restore event's manifest is A's)."""
    cluster = chain["cluster"]
    a_folder = cluster.nodes["node-a"].layout.model_dir(cluster.model.name, cluster.fingerprint)
    return len(packable_files(a_folder, max_files=10_000) or [])


def test_a_node_copy_start_serves_from_the_node(chain):
    node_copy: Start = chain["node_copy"]
    assert chain["weights_c"] in ("downloaded", "present", "ready"), chain["weights_c"]
    assert chain["restore_c"] == Status.RESTORED
    assert any("node" in line for line in node_copy.entry), node_copy.entry
    assert node_copy.hash_dirs_before == chain["cold"].hash_dirs_after
    assert node_copy.answer["choices"]


def test_the_archive_carries_the_engines_portable_caches_and_another_gpu_gets_none(chain):
    """What the real engine wrote on node A travels in the archive node B restored, all but the node's own caches;
    a node with another GPU (an L4 where A has an L40S) finds no archive under its key and restores nothing."""
    cold, restored = chain["cold"], chain["restored"]
    written = engine_caches_in(cold.files_after)
    assert "torch_compile_cache" in written and UNLISTED not in written, written
    portable = {name for name in written if named(name).scope is Scope.ARCHIVED}
    assert engine_caches_in(restored.files_before) == portable
    assert chain["restore_d"] == Status.MISS
    assert chain["files_d"] == {}, "a node with another GPU restored files of this one's"


def test_each_start_records_which_engine_caches_it_filled_and_which_it_found(chain):
    """Node A's engine wrote every cache it has (a first fill); node B found the restored ones and filled none of
    them anew except what vLLM's CPU build writes on every start. The pod-start event and the start record say so,
    and the metric counts it."""
    cluster = chain["cluster"]
    records = {}
    for case in ("cold", "restored"):
        node = cluster.nodes[chain[case].node]
        (event,) = [e for e in node.log.events if e["event"] == "pod-start"]
        (timeline,) = node.agent.starts.recent
        assert event["engine_caches"] == timeline.engine_caches
        records[case] = timeline.engine_caches
    cold_files = engine_caches_in(chain["cold"].files_after) - {"torch_compile_cache", UNLISTED}
    assert set(records["cold"]) == {n for n in cold_files if named(n).scope is not Scope.UNUSED}
    assert set(records["cold"].values()) <= {"written"}, records["cold"]
    restored_added = engine_caches_in({p: None for p in chain["restored"].added})
    for name, use in records["restored"].items():
        assert use == ("written" if name in restored_added else "present"), (name, use, records["restored"])
    node_a = cluster.nodes["node-a"]
    for name, use in records["cold"].items():
        counted = node_a.agent.metrics.engine_cache_use.labels(cluster.model.name, name, use)._value.get()
        assert counted == 1, (name, use)
