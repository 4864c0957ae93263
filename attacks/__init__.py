"""Attacks: each gets one adversary's view and returns scores; metrics are computed outside
the attack from ground truth. Importing a module registers it. Never imports running, storage,
interface or reports; imported by reports, running and interface (docs/design.md)."""

from fgl_workbench.adversary.candidates import Candidates
from fgl_workbench.attacks import audit  # noqa: F401
from fgl_workbench.attacks.attribute import (  # noqa: F401
    generator_source,
    inference,
    label_distribution,
    source_inference,
    statistics_inference,
    uploaded_distribution,
)
from fgl_workbench.attacks.base import ATTACKS, Attack, AttackInput, AttackOutput
from fgl_workbench.attacks.membership import (  # noqa: F401
    all_rounds,
    generator_loss,
    generator_shadow,
    lira,
    quantile,
    rmia,
    shadow,
    statistics_tracing,
    threshold,
)
from fgl_workbench.attacks.reconstruction import (  # noqa: F401
    class_gradient_inversion,
    feature_inversion,
    generator_sampling,
    gradient_inversion,
    graph_reconstruction,
    link_stealing,
    link_teller,
    statistics_inversion,
    structure_inversion,
)

__all__ = ["ATTACKS", "Attack", "AttackInput", "AttackOutput", "Candidates"]
