"""Datasets, partitions and the federation built from them.

Importing the partitioner modules registers them."""

from fgl_workbench.data import graph_partitioners, node_partitioners  # noqa: F401
