from fgl_workbench.seeding import Streams, derive_seed, public_seed


def test_child_seeds_differ_by_label_and_parent():
    labels = ["mia-threshold-5fb45dd7", "mia-threshold-f970f31f", "partition", "challenge"]
    seeds = {derive_seed(0, label) for label in labels}
    assert len(seeds) == len(labels)
    assert derive_seed(0, "partition") != derive_seed(1, "partition")
    assert derive_seed(3, "x", 2) == derive_seed(3, "x", 2)


def test_secret_streams_are_independent_of_the_public_seed():
    """An attack holding its own seed finds no public seed that explains it, and cannot tell
    one run key's other streams; without a key every stream is the public derivation."""
    secret, other = Streams.fresh(), Streams.fresh()
    mine = secret.seed(0, "attack", "mia-threshold-5fb45dd7")
    assert all(public_seed(s, "attack", "mia-threshold-5fb45dd7") != mine for s in range(20_000))
    assert secret.seed(0, "partition") != other.seed(0, "partition")
    assert secret.seed(0, "partition") == Streams(secret.key).seed(0, "partition")
    assert len({secret.seed(0, r) for r in ("partition", "target", "challenge", "noise")}) == 4
    public = Streams.public()
    assert public.reproducible and not secret.reproducible
    assert public.seed(7, "attack", "k") == derive_seed(7, "k")
    assert public.seed(7, "partition") == derive_seed(7, "partition")
    assert public.seed(7, "target") == 7
