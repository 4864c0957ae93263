"""FedTAD (Zhu et al., IJCAI 2024): FedAvg followed by topology-aware data-free distillation on
the server. Built piece by piece (issue 8); the target registers itself once it is whole."""
