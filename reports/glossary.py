"""The methods glossary at the end of a report: what each target, attack, defense and metric
in it is, in one line with its source, so a reader needs no other document."""

from __future__ import annotations

COMPONENTS: dict[str, str] = {
    # targets
    "fedavg": "FedAvg (McMahan et al. 2017): clients train locally, the server averages their "
    "models weighted by training size; node level on subgraphs, graph level on graph sets.",
    "centralized": "The non-federated baseline: one model trained on the union of the "
    "clients' training data.",
    "external": "A model trained outside the workbench and audited by fgl_workbench.external "
    "(audit_model, audit_uploads): the user's own training, named by a hash of its weights.",
    "opacus": "DP-SGD as the user ran it with Opacus; ε from our RDP accounting of its "
    "accountant's history (per graph at graph level; none per node, see the ε section).",
    "gap": "GAP (Sajadmanesh et al. 2023): aggregation perturbation (noisy neighbour sums) "
    "for edge- or node-level DP, trained with FedAvg.",
    # attacks
    "mia-threshold": "Loss / confidence / entropy threshold attack (Yeom et al. 2018; Song "
    "and Mittal 2021): members score better; the threshold is calibrated on the auxiliary pool.",
    "mia-shadow": "Shadow-model attack (Shokri et al. 2017; Olatunji et al. 2021 for nodes): "
    "shadow targets trained on auxiliary data teach a classifier of posteriors.",
    "mia-lira": "Likelihood-ratio attack (Carlini et al. 2022): Gaussian fits of the record's "
    "loss under reference models trained with and without it.",
    "mia-rmia": "Relative membership inference (Zarifzadeh et al. 2024): the record's "
    "likelihood ratio against population records, over reference models.",
    "link-stealing": "Link stealing (He et al. 2021): two nodes' served posteriors are closer "
    "when they are linked; unsupervised by one of eight distances, or an MLP trained on the "
    "edges the adversary knows.",
    "link-teller": "LinkTeller (Wu et al. 2022): an adversary who can change a node's features "
    "reads how far every other node's served posterior moves; only nodes within the model's "
    "reach in the same client's subgraph move.",
    "graph-reconstruction": "Edges read from node embeddings (served, or a published table) "
    "by their inner product or a decoder trained on known edges (GAE-style).",
    "attribute-inference": "A hidden node attribute (the label, or a feature column known only "
    "on the auxiliary pool) inferred from posteriors or embeddings by a classifier trained on "
    "the pool.",
    "label-distribution": "The server reads each client's label distribution from the output "
    "bias of its upload, through a regression fitted on local rounds it simulates on auxiliary "
    "data of known label mixtures (after iDLG's bias-gradient observation).",
    "gradient-inversion": "Gradient inversion (DLG, Zhu et al. 2019; iDLG; Geiping et al. "
    "2020's cosine objective): the server replays a client's local round on dummy nodes and "
    "labels until the replayed update matches the one it received.",
    "feature-inversion": "Embedding inversion (CE-FedGNN's Eq. 32): an insider holding the "
    "released model optimises a node's features until the model's embedding matches the one "
    "given out; a nearest-neighbour lookup is its baseline.",
    "statistics-inversion": "A client's labelled nodes read off the per-class means and counts "
    "it uploaded (O-pFGL-style class statistics).",
    "statistics-attribute-inference": "A hidden label or feature inferred by a naive-Bayes "
    "model pooled from the class statistics clients uploaded.",
    "uploaded-label-distribution": "A client's label distribution read off a per-class "
    "quantity it uploaded (class counts, FedTAD's reliability vector).",
    # defenses
    "dp-fedavg": "Client-level DP-FedAvg (McMahan et al. 2018): clipped client updates, "
    "Gaussian noise on their sum, Poisson client sampling; ε protects a whole client.",
    "dp-sgd": "DP-SGD (Abadi et al. 2016) through Opacus: per-record clipping and Gaussian "
    "noise in local training; ε protects one node or graph.",
    "gaussian-upload": "The Gaussian mechanism on each upload before it leaves the client "
    "(local DP on the update); ε protects the client's data.",
    "aggregation-perturbation": "GAP's noisy neighbour aggregation: edge-level ε protects one "
    "edge (not a node's membership); node-level needs bounded degree and DP-SGD.",
    "secure-aggregation": "Secure aggregation with CKKS homomorphic encryption (TenSEAL): the "
    "server sums ciphertexts and sees only the sum; no noise, no ε.",
    "information-bottleneck": "FedGC's information bottleneck: features encoded stochastically "
    "with a KL penalty γ; the KL term is reported, no formal guarantee.",
    "metric-dp": "Metric DP on released node embeddings (CE-FedGNN): Gaussian noise σ0; ε(ρ) "
    "holds for embeddings within distance ρ (the k-NN percentile).",
}

INDUCTIVE = (
    "An -inductive partition's clients hold no test nodes: its accuracy is the released "
    "model's on their test nodes answered on the whole population graph, not each client's "
    "own scoring, so it is not the same measurement as a transductive cell's."
)

METRICS: dict[str, str] = {
    "accuracy": "test accuracy of the released model on the clients' test sets, at the round "
    "chosen on validation; for an embedding release, a linear probe's accuracy. " + INDUCTIVE,
    "ε, δ": "the RDP accountant's (ε, δ) of the run's DP events, at the suite's δ.",
    "AUC": "area under the attack's ROC over the challenge (members: training records; "
    "non-members: held-out records), with a 95% bootstrap interval.",
    "TPR@x% FPR": "true positive rate at a false positive rate of x% (n/a when there are fewer "
    "than 1/x non-members): what an attacker confident in few claims achieves.",
    "advantage": "max over thresholds of TPR − FPR (Yeom et al. 2018).",
    "ε lb": "empirical lower bound on ε from the attack's best ROC point with Clopper–Pearson "
    "intervals (Jagielski et al. 2020): an accountant's ε below it would be wrong.",
    "DP ceiling": "the highest TPR at each FPR that any attack can reach against an (ε, δ)-DP "
    "run: min(e^ε·FPR + δ, 1 − e^−ε·(1 − δ − FPR)).",
    "client AUC": "the server's attack on each client's upload, scored on that client's "
    "records, mean over clients.",
    "label TV": "total-variation distance between a client's inferred and true training label "
    "distribution, mean over clients; 'prior' predicts the auxiliary pool's distribution.",
    "feature cosine": "reconstruction attacks: mean cosine similarity between each node's true "
    "and reconstructed features (sets matched one-to-one first); 'prior' guesses the auxiliary "
    "pool's mean feature vector for every node.",
    "feature AUC": "for binary features: how well the reconstructed values rank a node's "
    "present features above its absent ones; 'prior AUC' is the auxiliary mean's, which ranks "
    "common features first and so sits well above 0.5.",
    "MSE to nearest 1%": "CE-FedGNN's yardstick: the mean squared distance between a node's "
    "features and those of its nearest 1% of the population; an inversion worse than it is no "
    "closer than a look-alike.",
    "AUC intra / cut": "link attacks: AUC on node pairs inside one client (edges in its private "
    "subgraph) and on pairs across clients (edges the partition cut, held by no client).",
}


def glossary_rows(names: list[str]) -> list[list[str]]:
    """Entries for the components named, then every metric."""
    rows = [
        [n, COMPONENTS.get(n, "a plug-in component: see its own documentation")]
        for n in sorted(set(names))
    ]
    return rows + [[term, text] for term, text in METRICS.items()]
