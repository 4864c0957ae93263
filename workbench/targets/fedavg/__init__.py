"""FedAvg (McMahan et al. 2017) at node level (GCN/GraphSAGE/GAT on each client's subgraph)
and graph level (GIN with mean pooling).

Server weights: the number of nodes a client holds (labelled or not, as FedTAD's code does) at
node level; the number of training graphs at graph level. Every round the global model is
scored on every client's validation set; the released model is the best-validation round's
(the last round's under a DP defense, unless ``release: best_val`` asks for selection, whose ε
then says it excludes the validation records), and test accuracy is read for that round only.

With ``fine_tune`` (node level), each client then fine-tunes the released model on its own
training nodes and deploys the result: the "FedAvg + FT" baseline of personalised-FL papers
(O-pFGL's). Utility is the personalised models' on their own clients' test nodes, the global
model's beside it as ``global_*``.

With ``keep_local`` (graph level), the named modules stay with each client: only the others
are uploaded and averaged, and each client deploys its own model, the shared modules with its
own. GCFL's code, from which CeFGC's FedAvg figures come, shares only the GIN convolutions
(``keep_local: [project, head]``). Utility is then each client's model on its own data, and
every round is selected on the clients' own models' validation scores.

With ``score_local_models``, each client's locally trained model of every round is also scored
on its own validation data, and the best round's on its own test data is reported as
``local_*``: OpenFGL's default evaluation (``local_model_on_local_data``, run after the
aggregation but before the clients download the new model), by which papers built on it
report their FedAvg baselines. Only the figures change; nothing is released from it."""

from fgl_workbench.targets.fedavg.config import FedAvgConfig
from fgl_workbench.targets.fedavg.graph import GraphFedAvg
from fgl_workbench.targets.fedavg.node import NodeFedAvg
from fgl_workbench.targets.fedavg.states import average_states
from fgl_workbench.targets.fedavg.target import FedAvg

__all__ = ["FedAvg", "FedAvgConfig", "GraphFedAvg", "NodeFedAvg", "average_states"]
