"""Archives that become complete, shown with the real engine at tensor parallelism 2 (two CPU workers, each on its
own core; their ranks, rank_0_0 and rank_1_0, share one hash folder).

An archive taken before the engine wrote all its files (on a GPU, vLLM may write into the folder after start-up;
here one is made by publishing a copy of the compiling node's folder without its second rank and half its
kernels) is the key's only archive. Node B restores it and its vLLM compiles what it lacks; B's agent sees more
files than the archive held and publishes a fuller one; node C restores that one and compiles nothing."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from node_agent.runtime.archive import packable_files
from node_agent.runtime.compile_cache import Status, publish
from tests.engine.chain import EngineCluster, kernels, summary
from tests.engine.engine_world import cpu_environment, tiny_model
from tests.engine.versions import selected

pytestmark = pytest.mark.engine


def _early_copy(source, target) -> None:
    """The compiling node's folder as an archive taken early would hold it: no second rank, half the kernels."""
    shutil.copytree(source, target)
    for rank_1 in target.rglob("rank_1_0"):
        shutil.rmtree(rank_1)
    built = sorted(p for p in target.rglob("*") if p.is_file() and "inductor_cache" in p.parts and p.suffix == ".so")
    for library in built[len(built) // 2 :]:
        for sibling in library.parent.glob(library.name.split(".")[0] + ".*"):
            sibling.unlink()


@pytest.fixture(scope="module", params=selected())
def tp2(request, s3_server, tmp_path_factory):
    env = cpu_environment(request.param)
    scratch = tmp_path_factory.mktemp(f"engine-tp2-{request.param}")
    cluster = EngineCluster(
        s3_server, scratch / "cluster", env, tiny_model(env, scratch / "model"), tensor_parallel_size=2
    )
    name = cluster.model.name
    a, b, c, early = (cluster.node(n) for n in ("node-a", "node-b", "node-c", "node-early"))
    results: dict = {"cluster": cluster}
    a.agent.start()
    results["cold"], _ = cluster.start("cold", a, tick=False)  # A publishes nothing yet
    folder_a = a.layout.model_dir(name, cluster.fingerprint)
    folder_early = early.layout.model_dir(name, cluster.fingerprint)
    early.agent.start()  # the key of its node type (nothing published yet: a miss)
    _early_copy(folder_a, folder_early)
    state = early.agent.models[name]
    results["early"] = publish(
        store=early.agent.store,
        layout=early.layout,
        key=state.key,
        model=name,
        fingerprint=cluster.fingerprint,
        node="node-early",
        clock=time.time,
        log=early.log,
    )
    results["files"] = {
        "compiled": len(packable_files(folder_a, max_files=10_000) or []),
        "early": len(packable_files(folder_early, max_files=10_000) or []),
    }
    results["restore_b"] = b.agent.start()[name].status
    results["restored_early"], _ = cluster.start("restored-early", b)
    results["restore_c"] = c.agent.start()[name].status
    results["origin_c"] = c.layout.origin(name, cluster.fingerprint)  # what C restored (its own publish may follow)
    results["restored_full"], _ = cluster.start("restored-full", c)
    results["a_later"] = a.agent.tick().get(name)
    print(json.dumps({case: summary(results[case]) for case in ("cold", "restored_early", "restored_full")}, indent=1))
    return results


def test_an_early_archive_lacks_files_the_engine_wrote(tp2):
    assert tp2["early"].status == Status.PUBLISHED
    assert 0 < tp2["files"]["early"] < tp2["files"]["compiled"]
    ranks = {p.split("/")[-2] for p in tp2["cold"].files_after if p.endswith("/model") and "/rank_" in p}
    assert ranks == {"rank_0_0", "rank_1_0"}, "vLLM at tensor parallelism 2 writes one folder per rank"


def test_the_node_that_restored_it_compiles_the_rest_and_publishes_a_fuller_archive(tp2):
    restored = tp2["restored_early"]
    cluster = tp2["cluster"]
    assert tp2["restore_b"] == Status.RESTORED
    assert restored.hash_dirs_before == tp2["cold"].hash_dirs_after
    assert kernels({p: restored.files_after[p] for p in restored.added}), "vLLM compiled nothing the archive lacked"
    assert restored.answer["choices"]
    assert restored.judged[0]["event"] == "compile-miss"
    publishes = [e for e in cluster.nodes["node-b"].log.events if e["event"] == "publish"]
    assert [e["status"] for e in publishes] == [Status.REPUBLISHED]


def test_the_next_node_restores_the_fuller_archive_and_compiles_nothing(tp2):
    cluster, full = tp2["cluster"], tp2["restored_full"]
    assert tp2["restore_c"] == Status.RESTORED
    origin_b = cluster.nodes["node-b"].layout.origin(cluster.model.name, cluster.fingerprint)
    assert tp2["origin_c"]["manifest"] == origin_b["manifest"]
    assert set(kernels(tp2["cold"].files_after)) <= set(kernels(full.files_before))
    assert not kernels({p: full.files_after[p] for p in full.added}), "vLLM compiled a kernel anew"
    assert not [p for p in full.rewritten if p in kernels(full.files_before)], "vLLM rewrote a restored kernel"
    assert full.answer["choices"]


def test_the_compiling_node_publishes_nothing_a_fuller_archive_holds(tp2):
    assert tp2["a_later"] is not None and tp2["a_later"].status == Status.EXISTS
