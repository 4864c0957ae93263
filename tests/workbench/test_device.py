"""The device option: resolved with clear errors, the cell's tensors made on it, the dataset
moved once, the same numbers on the CPU whichever way it is named, and (where a GPU is
visible) a cell that trains and is attacked on it."""

import pytest
import torch

from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.datasets import to_device
from fgl_workbench.device import on_device, resolve_device, seeded_generator
from fgl_workbench.errors import ConfigError
from fgl_workbench.interface import api
from fgl_workbench.interface.cli import main
from fgl_workbench.running.suite import parse_suite
from fgl_workbench.storage.store import ResultsStore

RAW = {
    "name": "device",
    "reproducible": True,
    "seeds": [0],
    "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
    "partitions": [{"method": "metis", "num_clients": 3, "aux_fraction": 0.2}],
    "targets": [{"name": "fedavg", "params": {"rounds": 3}}],
    "attacks": [
        {"name": "mia-threshold"},
        {"name": "mia-lira", "params": {"num_references": 2}},
    ],
}
GPU = torch.cuda.is_available()


def test_resolve_device(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ConfigError, match="--device: 'cuda:1' asked for GPU 1, but no GPU"):
        resolve_device("cuda:1")
    with pytest.raises(
        ConfigError, match=r"device: expected auto, cpu, cuda or cuda:N \(got 'gpu'\)"
    ):
        resolve_device("gpu", "device")
    with pytest.raises(ConfigError, match="device"):
        parse_suite({**RAW, "device": "tpu"})


def test_on_device_sets_and_restores_the_default():
    before = torch.get_default_device()
    with on_device(torch.device("meta")):
        assert torch.zeros(2).device.type == "meta"
        assert torch.nn.Linear(2, 2).weight.device.type == "meta"
        assert torch.as_tensor([1, 2]).device.type == "meta"
    assert torch.get_default_device() == before
    a = torch.rand(3, generator=seeded_generator(7))
    assert torch.equal(a, torch.rand(3, generator=seeded_generator(7)))


def test_to_device_moves_every_tensor_once():
    ds = load_dataset("csbm", {"num_nodes": 100})
    moved = to_device(ds, torch.device("meta"))
    assert moved.data.x.device.type == "meta" and moved.data.edge_index.device.type == "meta"
    assert ds.data.x.device.type == "cpu"  # the loaded dataset is not changed in place
    graphs = to_device(load_dataset("synthetic-graphs", {"num_graphs": 10}), torch.device("meta"))
    assert all(g.x.device.type == "meta" for g in graphs.graphs)


def test_cpu_named_or_auto_gives_the_same_numbers(tmp_path, capsys):
    """Without a GPU, auto is the CPU: the same seed gives the same numbers either way."""
    if GPU:
        pytest.skip("auto picks the GPU here")
    auto = api.run_suite(RAW, tmp_path / "auto")
    suite = tmp_path / "s.yaml"
    suite.write_text(__import__("yaml").safe_dump(RAW))
    assert (
        main(["run", str(suite), "--out", str(tmp_path / "cpu"), "--quiet", "--device", "cpu"]) == 0
    )
    stores = [ResultsStore(auto.out_dir), ResultsStore(tmp_path / "cpu")]
    assert [s.meta("device") for s in stores] == ["cpu", "cpu"]
    (a,), (b,) = (s.cells() for s in stores)
    assert a.utility == b.utility
    metrics = [sorted((r.attack_key, r.metrics["auc"]) for r in s.attacks()) for s in stores]
    assert metrics[0] == metrics[1] and len(metrics[0]) == 2


def test_a_missing_gpu_is_a_one_line_error(tmp_path, capsys):
    if GPU:
        pytest.skip("a GPU is visible")
    suite = tmp_path / "s.yaml"
    suite.write_text(__import__("yaml").safe_dump(RAW))
    assert main(["run", str(suite), "--out", str(tmp_path / "o"), "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --device: 'cuda' asked for GPU 0") and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # refused before anything was written


@pytest.mark.skipif(not GPU, reason="no GPU visible")
def test_a_cell_trains_and_is_attacked_on_the_gpu(tmp_path):
    api.run_suite(RAW, tmp_path, device="cuda")
    store = ResultsStore(tmp_path)
    assert store.meta("device") == "cuda:0"
    assert all(r.status == "ok" for r in store.attacks())


def test_a_folder_keeps_the_device_its_cells_ran_on(tmp_path):
    """A GPU's numbers differ from the CPU's: resuming or attacking a folder on another
    device is refused instead of mixing both in one table."""
    api.run_suite(RAW, tmp_path, device="cpu")
    store = ResultsStore(tmp_path)
    store.set_meta("device", "cuda:0")  # as if its cells had run on a GPU
    store.close()
    with pytest.raises(ConfigError, match="cells ran on cuda:0, not cpu"):
        api.run_suite(RAW, tmp_path, device="cpu")
    with pytest.raises(ConfigError, match="cells ran on cuda:0, not cpu"):
        api.attack(tmp_path, [{"name": "mia-threshold", "params": {"hops": 0}}], device="cpu")
