"""Denoising score matching and annealed Langevin sampling on adjacency matrices: symmetric
masked noise, the loss of Eq. 5 with the right sign, a sampler that follows the exact score
of a known graph back to it, and a score network that learns."""

import pytest
import torch

from fgl_workbench.targets.cefgc.diffusion import SIGMAS, dsm_loss, langevin_sample, symmetric_noise
from fgl_workbench.targets.cefgc.score_network import EDPScoreNetwork, pair_mask


def test_noise_is_symmetric_standard_and_only_on_real_pairs():
    mask = torch.ones(200, 6, dtype=torch.bool)
    mask[:, 4:] = False
    z = symmetric_noise((200, 6, 6), mask, torch.Generator().manual_seed(0))
    torch.testing.assert_close(z, z.transpose(1, 2))
    assert (z[:, 4:] == 0).all() and (torch.diagonal(z, dim1=1, dim2=2) == 0).all()
    real = z[pair_mask(mask)]
    assert real.std() == pytest.approx(1.0, abs=0.05) and real.mean() == pytest.approx(0, abs=0.05)


def test_the_loss_is_eq_5_with_the_score_of_the_perturbation():
    adj = torch.zeros(64, 5, 5)
    x, mask = torch.ones(64, 5, 1), torch.ones(64, 5, dtype=torch.bool)
    zero = dsm_loss(lambda a, x, m, lv: torch.zeros_like(a), adj, x, mask, SIGMAS)
    # a zero score leaves ½σ²‖noise/σ²‖² = ½‖z‖², 20 ordered pairs of unit variance: 10
    assert zero.item() == pytest.approx(10.0, rel=0.1)
    sig = torch.tensor(SIGMAS)

    def exact(a, x, m, level):  # the true score of q_σ(Â | A = 0): −Â/σ²
        return -a / sig[level].view(-1, 1, 1) ** 2 * pair_mask(m)

    assert dsm_loss(exact, adj, x, mask, SIGMAS).item() == pytest.approx(0.0, abs=1e-9)

    def wrong_sign(a, x, m, level):
        return -exact(a, x, m, level)

    assert dsm_loss(wrong_sign, adj, x, mask, SIGMAS).item() > 3 * zero.item()


def test_langevin_follows_an_exact_score_back_to_its_graph():
    gen = torch.Generator().manual_seed(1)
    target = (torch.rand(4, 8, 8, generator=gen) < 0.4).float().triu(1)
    target = target + target.transpose(1, 2)
    mask = torch.ones(4, 8, dtype=torch.bool)
    mask[3, 6:] = False
    target = target * pair_mask(mask)
    sig = torch.tensor(SIGMAS)

    def score(a, x, m, level):  # ∇ log of N(target, σ² I): the data is one known graph
        return (target - a) / sig[level].view(-1, 1, 1) ** 2 * pair_mask(m)

    out = langevin_sample(
        score, torch.ones(4, 8, 1), mask, SIGMAS, steps=50, step_ratio=0.1, generator=gen
    )
    torch.testing.assert_close(out, target)


def test_the_score_network_learns_a_family_of_graphs():
    torch.manual_seed(0)
    n = 6
    ring = torch.zeros(n, n)
    ring[torch.arange(n), (torch.arange(n) + 1) % n] = 1
    adj = (ring + ring.T).expand(16, n, n)
    x, mask = torch.ones(16, n, 1), torch.ones(16, n, dtype=torch.bool)
    net = EDPScoreNetwork(1, levels=len(SIGMAS), channels=(2, 2), gin_sublayers=2)
    opt = torch.optim.Adam(net.parameters(), lr=5e-3)
    gen = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(80):
        opt.zero_grad()
        loss = dsm_loss(net, adj, x, mask, SIGMAS, gen)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-10:]) / 10 < 0.6 * sum(losses[:10]) / 10
