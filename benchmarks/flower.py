"""Seconds per round and bytes per client per round of FedAvg on Flower (the ``flower``
target: Flower's ``FedAvg`` strategy and a ``ClientApp`` on the in-process ``InlineGrid``,
every message recorded by ``RecordingGrid`` with its serialised protobuf size) on Cora
(Louvain, 3 and 10 clients; GCN hidden 64, 3 local epochs), without and with central
dp-fedavg (clip 1, noise multiplier 1), Flower with its clients reporting metrics (its
default: a train reply carries the loss and example count, and every round ends with
federated evaluation, an evaluate request and a metrics reply per client) and without.

Reference: the built-in loop (the ``fedavg`` target) at the same settings (``release: last``
under dp-fedavg, the round Flower releases), measured in the same process so both see the
same machine load; the ratios are flower / fedavg. Seconds per round: wall time of ``fit``
(set-up and the final test scoring included, minus nothing) over the rounds, the median of
``--repeats`` fits after a one-round warm-up of each, the targets alternating. Bytes per
client per round: from each run's transcript, the sum of ``nbytes`` of the messages to and
from a client in a round, averaged over clients and rounds (fedavg records the raw tensor
bytes of its state dicts, flower each message's protobuf). Last, one cProfile of the Flower
path (10 clients, no DP, metrics on): its top 15 functions by cumulative time and where its
time goes beside the built-in loop's.

``--deployment`` instead: one fit of the flower target on Flower's Deployment Engine (a
SuperLink and a SuperNode per client started on 127.0.0.1, the app submitted with ``flwr
run``: ``backend: deployment``) beside one inline fit, Cora-3, no DP, metrics on: seconds per
round (wall time of ``fit``, the processes' start and stop included) and bytes per client per
round (a deployment's messages carry larger metadata).

    FGLWB_DATA=../shared/data FGLWB_CACHE=$(mktemp -d) OMP_NUM_THREADS=2 \\
        python benchmarks/flower.py [--rounds 10] [--repeats 3] [--deployment]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import logging
import pstats
import statistics
import time
from collections import defaultdict
from typing import Any

import torch

import fgl_workbench.data  # noqa: F401
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.recipe import FederationRecipe
from fgl_workbench.defenses.base import applied
from fgl_workbench.targets import TARGETS
from fgl_workbench.transcript import SERVER, Transcript, client

MODEL = {"arch": "gcn", "hidden": 64}
COMMON = {"model": MODEL, "local_epochs": 3}
CLIENTS = (3, 10)
DP = {"clip": 1.0, "noise_multiplier": 1.0, "mode": "central"}
# (label, target, extra config; dp-fedavg's extra config on fedavg)
VARIANTS = (
    ("fedavg", "fedavg", {}),
    ("flower", "flower", {}),
    ("flower-nm", "flower", {"report_metrics": False}),
)


def config(target: str, extra: dict[str, Any], rounds: int, dp: bool) -> dict[str, Any]:
    cfg = {**COMMON, **extra, "rounds": rounds}
    if target == "fedavg" and dp:
        cfg["release"] = "last"
    return cfg


def fit(fed, target: str, cfg: dict[str, Any], dp: bool) -> tuple[float, float, Transcript]:
    """Wall and CPU seconds (all of the process's threads) of one fit, and its transcript."""
    defenses = [applied("dp-fedavg", DP)] if dp else []
    start, cpu = time.perf_counter(), time.process_time()
    trained = TARGETS.get(target).fit(fed, cfg, defenses, seed=0)
    return time.perf_counter() - start, time.process_time() - cpu, trained.transcript


def bytes_per_client_round(transcript: Transcript, num_clients: int) -> dict[str, float]:
    """Mean over (client, round) pairs with any traffic of the bytes sent to / from it."""
    down: dict[tuple[int, str], int] = defaultdict(int)
    up: dict[tuple[int, str], int] = defaultdict(int)
    names = {client(k) for k in range(num_clients)}
    for m in transcript.messages:
        if m.sender == SERVER and m.receiver in names:
            down[m.round, m.receiver] += m.nbytes
        elif m.receiver == SERVER and m.sender in names:
            up[m.round, m.sender] += m.nbytes
    pairs = set(down) | set(up)
    d = sum(down.values()) / len(pairs)
    u = sum(up.values()) / len(pairs)
    return {"down": d, "up": u, "total": d + u}


def messages_of(transcript: Transcript) -> str:
    """Client 0's round-1 messages as the transcript holds them, in order."""
    rows = [
        f"{'down' if m.sender == SERVER else 'up'} {m.kind} {m.nbytes} B"
        for m in transcript.messages
        if m.round == 1 and client(0) in (m.sender, m.receiver)
    ]
    return "; ".join(rows)


def measure(fed, k: int, dp: bool, rounds: int, repeats: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for label, target, extra in VARIANTS:  # warm-up: first calls, kernels, Flower's imports
        fit(fed, target, config(target, extra, 1, dp), dp)
        out[label] = {"seconds": [], "cpu": []}
    for i in range(repeats):
        order = VARIANTS[i % len(VARIANTS) :] + VARIANTS[: i % len(VARIANTS)]
        for label, target, extra in order:
            seconds, cpu, transcript = fit(fed, target, config(target, extra, rounds, dp), dp)
            out[label]["seconds"].append(seconds / rounds)
            out[label]["cpu"].append(cpu / rounds)
            out[label]["bytes"] = bytes_per_client_round(transcript, k)
            out[label]["messages"] = messages_of(transcript)
    for row in out.values():
        row["median"] = statistics.median(row["seconds"])
        row["cpu_median"] = statistics.median(row["cpu"])
    return out


def cumulative(stats: pstats.Stats, file_part: str, name: str, caller: str = "") -> float:
    """Cumulative seconds of the functions ``name`` in a file matching ``file_part`` (only
    through callers whose function name is ``caller``, if given)."""
    total = 0.0
    for (file, _, fn), (_, _, _, ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if fn != name or file_part not in file:
            continue
        if not caller:
            total += ct
            continue
        total += sum(edge[3] for (_, _, c), edge in callers.items() if c == caller)
    return total


def profile(fed, target: str, rounds: int) -> pstats.Stats:
    fit(fed, target, config(target, {}, 1, False), False)
    profiler = cProfile.Profile()
    profiler.enable()
    fit(fed, target, config(target, {}, rounds, False), False)
    profiler.disable()
    return pstats.Stats(profiler, stream=io.StringIO())


def where_time_goes(flower: pstats.Stats, fedavg: pstats.Stats, rounds: int) -> None:
    """Seconds per round in the parts of each fit, by cumulative time: the unindented rows
    do not overlap (the indented ones lie inside the row above them), and "rest" is the fit
    less the unindented rows."""
    # (label, flower's functions, fedavg's): (file part, function[, only through caller])
    rows: list[tuple[str, list[tuple[str, ...]], list[tuple[str, ...]]]] = [
        ("fit (all)", [("targets/flower/target", "fit")], [("targets/fedavg/target", "fit")]),
        ("local training", [("fedavg/node", "train_local")], [("fedavg/node", "train_local")]),
        (
            "validation every round, and the final test",
            [
                ("targets/training", "score_personalised", "evaluate"),
                ("targets/training", "score_node_clients", "fit"),
            ],
            [("fedavg/rounds", "scores")],
        ),
        ("transcript recording", [("flower/grid", "_record")], [("transcript", "broadcast")]),
        ("  message_to_proto(msg).ByteSize() (sizing)", [("serde", "message_to_proto")], []),
        ("  ArrayRecord -> state dict (the payload)", [("flower/grid", "state_dict")], []),
        ("  Transcript.send (payload snapshot: clone)", [("transcript", "broadcast")], []),
        (
            "ArrayRecord -> state dict on the clients (np.load)",
            [
                ("message/arrayrecord", "to_torch_state_dict", "train"),
                ("message/arrayrecord", "to_torch_state_dict", "evaluate"),
            ],
            [],
        ),
        (
            "state dict -> ArrayRecord, clients' replies (np.save)",
            [("message/arrayrecord", "__init__", "train")],
            [],
        ),
        (
            "aggregation (Flower: aggregate_train + aggregate_evaluate)",
            [("strategy/fedavg", "aggregate_train"), ("strategy/fedavg", "aggregate_evaluate")],
            [("fedavg/states", "average_states")],
        ),
        ("Flower's log() (muted below ERROR)", [("common/logger", "log")], []),
    ]
    print(
        f"\n{'seconds per round (profiled, Cora-10), share of fit':<62}"
        f"{'flower':>9}{'%':>6}{'fedavg':>9}{'%':>6}"
    )
    table = [
        (
            label,
            sum(cumulative(flower, *f) for f in ours) / rounds,
            sum(cumulative(fedavg, *f) for f in ref) / rounds if ref else None,
        )
        for label, ours, ref in rows
    ]
    fa, fb = table[0][1], table[0][2] or 0.0
    top = [r for r in table[1:] if not r[0].startswith(" ")]
    table.append(
        (
            "rest (Flower: Message, ClientApp, strategy; fedavg: its loop)",
            fa - sum(r[1] for r in top),
            fb - sum(r[2] or 0.0 for r in top),
        )
    )
    for label, a, b in table:
        theirs = f"{'-':>9}{'':>6}" if b is None else f"{b:>9.4f}{100 * b / fb:>6.1f}"
        print(f"{label:<62}{a:>9.4f}{100 * a / fa:>6.1f}{theirs}")


def deployment(rounds: int) -> None:
    """One inline and one deployed fit of Cora-3 (no DP): seconds and bytes per round."""
    fed = FederationRecipe(dataset="Cora", method="louvain", num_clients=3, seed=0).build()
    print(f"{'Cora-3 backend':<16}{'s/round':>9}{'B total/client/rnd':>20}")
    for backend in ("inline", "deployment"):
        cfg = {**config("flower", {}, rounds, False), "backend": backend}
        seconds, _, transcript = fit(fed, "flower", cfg, False)
        total = bytes_per_client_round(transcript, 3)["total"]
        print(f"{backend:<16}{seconds / rounds:>9.3f}{total:>20.0f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--deployment", action="store_true")
    args = parser.parse_args()
    import flwr

    if args.deployment:
        deployment(args.rounds)
        return

    # the strategy's construction warns that fraction_evaluate 0 skips federated evaluation
    # (flower-nm), outside the engine's muting of Flower's log
    logging.getLogger("flwr").setLevel(logging.ERROR)

    print(
        f"torch {torch.__version__}, flwr {flwr.__version__}, threads "
        f"{torch.get_num_threads()}, rounds {args.rounds}, repeats {args.repeats} (median)"
    )
    ds = load_dataset("Cora")
    feds = {k: build_federation(ds, make_partition(ds, "louvain", k, seed=0)) for k in CLIENTS}
    head = (
        f"{'setting':<13}{'variant':<11}{'s/round':>9}{'ratio':>7}{'cpu s/rnd':>10}{'ratio':>7}"
        f"{'B down/client/rnd':>19}{'B up':>10}{'B total':>10}{'ratio':>7}"
    )
    print(head)
    shown: dict[str, str] = {}
    for k in CLIENTS:
        for dp in (False, True):
            rows = measure(feds[k], k, dp, args.rounds, args.repeats)
            ref = rows["fedavg"]
            setting = f"Cora-{k}{' dp' if dp else ''}"
            for label, row in rows.items():
                b = row["bytes"]
                print(
                    f"{setting:<13}{label:<11}{row['median']:>9.4f}"
                    f"{row['median'] / ref['median']:>7.2f}{row['cpu_median']:>10.4f}"
                    f"{row['cpu_median'] / ref['cpu_median']:>7.2f}"
                    f"{b['down']:>19.0f}{b['up']:>10.0f}"
                    f"{b['total']:>10.0f}{b['total'] / ref['bytes']['total']:>7.3f}"
                )
                shown.setdefault(f"{label}{' dp' if dp else ''}", row["messages"])
            spread = ", ".join(
                f"{label} " + "/".join(f"{s:.3f}" for s in row["seconds"])
                for label, row in rows.items()
            )
            print(f"{'':<13}runs, wall s/round: {spread}")
    print(
        "\nflower-nm: report_metrics false (no evaluate round trip, a train reply carries its "
        "arrays and a constant weight).\nMessages per client per round (client 0, round 1, "
        "as recorded):"
    )
    for label, rows_text in shown.items():
        print(f"  {label:<13}{rows_text}")
    print(
        "  fedavg: the model down, the trained model up (raw tensor bytes); the server scores "
        "validation itself, sending nothing.\n  flower: a train request (model) down, its reply "
        "(model + metrics) up, then an evaluate request (the new model) down and its reply "
        "(metrics) up;\n  each size is the message's protobuf (npy headers, keys, metadata)."
    )

    flower_stats = profile(feds[10], "flower", args.rounds)
    fedavg_stats = profile(feds[10], "fedavg", args.rounds)
    out = io.StringIO()
    flower_stats.stream = out  # type: ignore[attr-defined]
    flower_stats.sort_stats("cumulative").print_stats(15)
    print("\ncProfile of the flower fit (Cora-10, no DP, metrics on), top 15 cumulative:")
    print(out.getvalue().strip())
    where_time_goes(flower_stats, fedavg_stats, args.rounds)


if __name__ == "__main__":
    main()
