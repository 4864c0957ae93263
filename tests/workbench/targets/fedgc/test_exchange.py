import torch
from torch_geometric.utils import k_hop_subgraph

from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.targets.fedgc.exchange import NO_LABEL, extended_client


def test_a_client_grows_by_its_neighbourhood_without_labels_or_masks():
    ds = csbm(CSBMParams(num_nodes=200, num_classes=3, num_features=8, seed=1))
    fed = build_federation(ds, make_partition(ds, "label-dirichlet", 4, 0))
    c = fed.clients[0]
    grown, received = extended_client(ds, c, hops=1)
    d, own = grown.data, c.data.global_id
    expected = k_hop_subgraph(own, 1, ds.data.edge_index, num_nodes=ds.num_items)[0]
    assert torch.equal(d.global_id, expected)
    mine = torch.isin(d.global_id, own)
    for name in ("train_mask", "val_mask", "test_mask"):  # the same nodes, no foreign one
        assert torch.equal(d.global_id[d[name]], own[c.data[name]])
    assert (d.y[~mine] == NO_LABEL).all() and torch.equal(d.y[mine], c.data.y)
    assert torch.equal(received.global_id, d.global_id[~mine])
    assert torch.equal(received.x, ds.data.x[received.global_id])
    assert d.edge_index.shape[1] > c.data.edge_index.shape[1]  # the cut edges are back
    same, nothing = extended_client(ds, c, hops=0)
    assert same is c and nothing.global_id.numel() == 0
