"""A link adversary's view under pseudonyms holds answers and nothing of the numbering behind
them: a wrapper over the original API handed a plug-in the mapping and the raw API (a
review, 2026-11-27)."""

import pickle

import numpy as np
import torch

from fgl_workbench.adversary.exchanged import ExchangedEmbeddings
from fgl_workbench.adversary.pseudonyms import renamed_api
from fgl_workbench.query import AnswerTable, ServedAPI, TableQueryAPI


def _names(n: int = 6) -> np.ndarray:
    return np.random.default_rng(0).permutation(n)


def test_every_renamed_api_answers_by_name_and_holds_no_mapping():
    names = _names()
    ids = np.argsort(names)
    logits, embeddings = torch.randn(6, 3), torch.randn(6, 4)
    probes = {2: (np.array([1, 4]), torch.tensor([[0.5], [0.25]]))}
    apis = [
        ServedAPI(logits, embeddings, probes, 0.1),
        AnswerTable({0: logits}, {0: embeddings}, None, None),
        TableQueryAPI(logits),
    ]
    for api in apis:
        renamed = renamed_api(api, names)
        assert type(renamed) is type(api)
        torch.testing.assert_close(renamed.logits(np.arange(6)), logits[torch.as_tensor(ids)])
        held = pickle.dumps(renamed)  # what a fenced plug-in's worker receives
        assert pickle.dumps(names) not in held and pickle.dumps(ids) not in held
        assert not any(isinstance(v, np.ndarray) and v.size == 6 for v in vars(renamed).values())
    moved, by = renamed_api(apis[0], names).influence(int(names[2]), 0.1)
    order = np.argsort(names[[1, 4]])
    assert list(moved) == list(names[[1, 4]][order])
    torch.testing.assert_close(by, probes[2][1][torch.as_tensor(order)])


def test_exchanged_releases_are_renamed():
    names = _names()
    releases = ExchangedEmbeddings(np.array([0, 3, 3]), torch.randn(3, 2), False)
    renamed = renamed_api(releases, names)
    assert list(renamed.ids) == list(names[[0, 3, 3]])
    torch.testing.assert_close(renamed.embeddings(names[[3]]), releases.embeddings([3]))
