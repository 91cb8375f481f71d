import yaml

from tests.synth import ROOT
from warmstart_cli.__main__ import main


def test_plan_prints_every_models_derived_settings(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["plan", "--env", "prod"]) == 0
    out = capsys.readouterr().out
    assert "model qwen3-6-35b-a3b" in out and "model llama-3-3-70b" in out
    block = out.split("model qwen3-6-35b-a3b")[1].split("model llama-3-3-70b")[0]
    assert "tensor parallel        2 (auto)" in block
    assert "streamer concurrency   17" in block
    assert "distributed streaming  yes" in block
    assert "/mnt/k8s-disks/0/compile-cache" in block
    assert "fits: needs 169 GB of 30400 GB" in block  # 67 x 2 + one image 25 + compile 10
    assert "weights cache          on: /mnt/k8s-disks/0/warmstart/weights/qwen3-6-35b-a3b/" in block


def test_plan_prints_the_pools_placement_on_what_a_node_offers(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["plan", "--env", "prod"]) == 0
    pool = capsys.readouterr().out.split("model qwen3-6-35b-a3b")[0]
    assert "GPU pool p5.48xlarge, gpu_limit 64" in pool
    assert "node p5.48xlarge: 191.199 CPU, 1891.9 GiB for models (allocatable 191.45 CPU, 1892.9 GiB" in pool
    assert "steady: 32 GPUs of nodes: 2 x p5.48xlarge (llama-3-3-70b x1 + qwen3-6-35b-a3b x1)" in pool
    assert "every model's rollout pod at once: 40 GPUs of nodes" in pool


def test_plan_runs_the_synth_checks(tmp_path, capsys):
    document = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
    document["models"][0]["enforce_eager"] = True
    path = tmp_path / "eager.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["plan", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "models[0].enforce_eager" in err and "fix:" in err


def test_plan_warns_about_capped_concurrency(tmp_path, capsys):
    document = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
    document["streamer"] = {"max_concurrency": 2}
    path = tmp_path / "capped.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["plan", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "streamer concurrency   2 (capped)" in out
    assert "concurrency capped at 2 (size/chunk gives 3)" in out


def _apply_record(document: dict, fix: dict) -> dict:
    """Applies a fix as `plan --problems-json` prints it, knowing only the JSON (a tool's view)."""
    from warmstart.checks.fix import UNSET, Ask, Edit, Fix, apply_fix

    def value(item):
        if isinstance(item, dict) and set(item) == {"ask", "example"}:
            return Ask(item["ask"], item["example"])
        if isinstance(item, dict):
            return {key: value(inner) for key, inner in item.items()}
        return [value(inner) for inner in item] if isinstance(item, list) else item

    edits = [Edit(e["path"], UNSET if e.get("remove") else value(e["value"])) for e in fix["edits"]]
    return apply_fix(document, Fix(tuple(edits)), use_examples=True)


def test_plan_prints_the_fixes_as_json_and_a_tool_can_apply_them(tmp_path, capsys):
    import json

    from warmstart.loader import parse_config

    document = yaml.safe_load((ROOT / "config" / "existing.yaml").read_text())
    document["compute"]["existing_controller"]["version"] = "1.10.2"  # below the CRDs warmstart follows
    document["models"][0]["tensor_parallel_size"] = 3
    path = tmp_path / "refused.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["plan", "--config", str(path), "--problems-json"]) == 2
    records = json.loads(capsys.readouterr().out)
    assert [r["field"] for r in records] == ["compute.existing_controller.version", "models[0].tensor_parallel_size"]
    asked = records[0]["fixes"][0]["edits"][0]["value"]
    assert asked == {"ask": "the upgraded controller's version", "example": "1.14.1"}
    for record in records:
        document = _apply_record(document, record["fixes"][0])
    parse_config(document)  # the first alternative of each, applied from the JSON alone, is accepted
