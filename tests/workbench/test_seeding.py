from workbench.seeding import derive_seed


def test_child_seeds_differ_by_label_and_parent():
    labels = ["mia-threshold-5fb45dd7", "mia-threshold-f970f31f", "partition", "challenge"]
    seeds = {derive_seed(0, label) for label in labels}
    assert len(seeds) == len(labels)
    assert derive_seed(0, "partition") != derive_seed(1, "partition")
    assert derive_seed(3, "x", 2) == derive_seed(3, "x", 2)
