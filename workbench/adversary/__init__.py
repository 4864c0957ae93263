"""What an adversary receives: the views cut from a trained target, its background knowledge,
the candidates it is asked about and the artefacts it reads from a transcript. Imports
accountants, the shared modules, data, models, defenses and targets; imported by attacks,
running and interface (docs/design.md, the package map)."""
