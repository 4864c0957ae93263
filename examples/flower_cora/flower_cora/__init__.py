"""A Flower app: FedAvg of a two-layer GCN on Cora, split among the SuperNodes."""
