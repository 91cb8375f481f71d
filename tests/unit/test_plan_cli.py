import yaml

from tests.synth import ROOT
from warmstart.__main__ import main


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
