"""The ways in: the command line (``fgl-workbench``) and the Python API (``api``). May import
every part; nothing imports it but ``fgl_workbench.__main__`` (docs/design.md)."""
