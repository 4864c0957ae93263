"""fgl-workbench: privacy and attack evaluation for federated graph learning."""

__version__ = "0.1.0"
