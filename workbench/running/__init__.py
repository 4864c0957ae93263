"""Running a suite: the YAML's validation and expansion into cells, each cell's stages, the
executors, calibration by ε, the component listing and the fence around plug-in attacks. May
import every part but interface and reports; imported only by interface (docs/design.md)."""
