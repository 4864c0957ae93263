"""FedGC: federated graph condensation (issue 9)."""
