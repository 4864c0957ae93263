"""Audits of what users already have, trained outside the workbench: their membership scores
(``audit_scores``), their trained GNN (``audit_model``), the uploads their server logged
(``audit_uploads``) and their own Flower apps (``fgl_workbench.external.flower``'s
``FlowerRecorder``, imported from there: Flower is the optional extra
``fgl-workbench[flower]``). Each returns one result object with intervals, a summary, a
frame, the per-record scores and a report, as a run of the workbench's own targets would."""

from fgl_workbench.external.model import ModelAudit, audit_model
from fgl_workbench.external.scores import ScoreAudit, audit_scores, audit_stored, degree_buckets
from fgl_workbench.external.uploads import audit_uploads

__all__ = [
    "ModelAudit",
    "ScoreAudit",
    "audit_model",
    "audit_scores",
    "audit_stored",
    "audit_uploads",
    "degree_buckets",
]
