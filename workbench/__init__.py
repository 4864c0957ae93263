"""fgl-workbench: privacy and attack evaluation for federated graph learning. The loose modules
here are shared by every stage; docs/design.md opens with the map of the sub-packages."""

__version__ = "0.1.0"
