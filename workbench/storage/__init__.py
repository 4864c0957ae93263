"""What is kept and read back: the results store and the snapshots of trained targets, restored
from untrusted folders through the allow-list in ``fgl_workbench.storable``. Never imports
attacks, running or interface; imported by reports, running and interface (docs/design.md)."""
