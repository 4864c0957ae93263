"""Datasets, partitions and the federation built from them; importing the partitioner modules
registers them. Imports only the shared modules; every part above them may import it."""

from fgl_workbench.data import graph_partitioners, node_partitioners  # noqa: F401
