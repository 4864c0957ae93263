"""The score network of CeFGC's graph diffusion model: EDP-GNN (Niu et al., AISTATS 2020), the
generator the paper uses "with the parameter setup in [58]".

It estimates the score ∇_Â log q_σ(Â) of a noisy symmetric adjacency Â at noise level σ_l.
The adjacency enters as two channels [Â, 1 − Â]. Each EDP layer runs a multi-channel GIN
(every channel aggregates, the channels' aggregates are concatenated, each node's degree per
channel is appended) to get node features, then an edge MLP reads each pair's channels and
both endpoints' features and writes new channels, symmetrised. A final MLP reads every
layer's channels of a pair and gives its score. Noise conditioning is explicit: each
conditional layer holds one gain and bias per level, picked by the level's index (the
reference code infers the level from the batch position).

Dense batches: ``adj`` [B, N, N], ``x`` [B, N, F], ``mask`` [B, N] (False on padding); the
score is symmetric, zero on the diagonal and on padded pairs."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


def symmetric(a: torch.Tensor) -> torch.Tensor:
    """(a + aᵀ)/2 over the last two dimensions."""
    return (a + a.transpose(-1, -2)) / 2


def pair_mask(mask: torch.Tensor) -> torch.Tensor:
    """[B, N, N]: True for pairs of two real, distinct nodes."""
    pairs = mask.unsqueeze(-1) & mask.unsqueeze(-2)
    return pairs & ~torch.eye(mask.shape[1], dtype=torch.bool, device=mask.device)


class ConditionalLinear(nn.Module):
    """A linear layer followed by a per-noise-level gain and bias."""

    def __init__(self, fan_in: int, fan_out: int, levels: int) -> None:
        super().__init__()
        self.linear = nn.Linear(fan_in, fan_out)
        self.gain = nn.Parameter(torch.ones(levels, fan_out))
        self.bias = nn.Parameter(torch.zeros(levels, fan_out))

    def forward(self, h: torch.Tensor, level: torch.Tensor) -> torch.Tensor:
        """``h`` [B, ..., fan_in], ``level`` [B] level indices."""
        return self.condition(self.linear(h), level)

    def condition(self, pre: torch.Tensor, level: torch.Tensor) -> torch.Tensor:
        """The level's gain and bias on ``pre`` [B, ..., fan_out], the linear map's output."""
        shape = (level.shape[0],) + (1,) * (pre.dim() - 2) + (-1,)
        return self.gain[level].view(shape) * pre + self.bias[level].view(shape)


class MultiChannelGIN(nn.Module):
    """GIN sub-layers over C adjacency channels: h ← MLP([A_c h + (1 + ε) h]_c), the
    sub-layers' outputs summed through linear maps into the layer's node features."""

    def __init__(self, channels: int, fan_in: int, hidden: int, sublayers: int, out: int) -> None:
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(sublayers))
        sizes = [fan_in + channels] + [hidden] * sublayers  # + each channel's degree
        self.mlps = nn.ModuleList(
            nn.Sequential(nn.Linear(channels * a, hidden), nn.Tanh(), nn.Linear(hidden, b))
            for a, b in zip(sizes[:-1], sizes[1:], strict=True)
        )
        self.readout = nn.ModuleList(nn.Linear(hidden, out) for _ in range(sublayers))
        self.out = nn.Linear(out, out)

    def forward(self, x: torch.Tensor, adj: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``adj`` [B, C, N, N]."""
        h = torch.cat([x, adj.sum(-1).transpose(1, 2)], -1)  # degree per channel
        total = 0.0
        for i, (mlp, read) in enumerate(zip(self.mlps, self.readout, strict=True)):
            agg = adj @ h.unsqueeze(1) + (1 + self.eps[i]) * h.unsqueeze(1)  # [B, C, N, F]
            h = mlp(agg.permute(0, 2, 1, 3).flatten(2)) * mask.unsqueeze(-1)
            total = total + read(h)
        return self.out(F.leaky_relu(total)) * mask.unsqueeze(-1)


class EdgeMLP(nn.Module):
    """Reads a pair's channels and both endpoints' features; writes new channels.

    The first layer's map of [channels, x_u, x_v] is split by its blocks: the endpoints'
    parts are computed once per node and broadcast over pairs, rather than on a
    [B, N, N, C + 2F] concatenation (the same function; 40 % fewer flops per pair)."""

    def __init__(self, channels: int, features: int, out: int, levels: int) -> None:
        super().__init__()
        hidden = 2 * max(channels, out, features)
        self.first = ConditionalLinear(channels + 2 * features, hidden, levels)
        self.second = ConditionalLinear(hidden, hidden, levels)
        self.last = nn.Linear(hidden, out)

    def forward(self, adj, x, level, pairs: torch.Tensor) -> torch.Tensor:
        c, f = adj.shape[1], x.shape[-1]
        w, b = self.first.linear.weight, self.first.linear.bias
        u = F.linear(x, w[:, c : c + f], b).unsqueeze(2)  # [B, N, 1, H]: the pair's first node
        v = F.linear(x, w[:, c + f :]).unsqueeze(1)  # [B, 1, N, H]: its second
        pre = F.linear(adj.permute(0, 2, 3, 1), w[:, :c]) + u + v  # [B, N, N, H]
        h = F.elu(self.first.condition(pre, level))
        h = F.elu(self.second(h, level))
        new = symmetric(self.last(h).permute(0, 3, 1, 2))
        return new * pairs.unsqueeze(1)


class EDPScoreNetwork(nn.Module):
    def __init__(
        self,
        node_features: int,
        levels: int,
        channels: Sequence[int] = (2, 4, 4, 4, 2),
        features: int = 16,
        gin_hidden: int = 16,
        gin_sublayers: int = 4,
    ) -> None:
        super().__init__()
        self.levels = levels
        self.gins, self.edges = nn.ModuleList(), nn.ModuleList()
        c_in, f_in = 2, node_features
        for c_out in channels:
            self.gins.append(MultiChannelGIN(c_in, f_in, gin_hidden, gin_sublayers, features))
            self.edges.append(EdgeMLP(c_in, features, c_out, levels))
            c_in, f_in = c_out, features
        stacked = 2 + sum(channels)
        self.score_hidden = ConditionalLinear(stacked, 2 * stacked, levels)
        self.score_mid = ConditionalLinear(2 * stacked, 2 * stacked, levels)
        self.score_out = nn.Linear(2 * stacked, 1)

    def forward(
        self, adj: torch.Tensor, x: torch.Tensor, mask: torch.Tensor, level: torch.Tensor
    ) -> torch.Tensor:
        """The score of ``adj`` [B, N, N] at noise levels ``level`` [B] (indices)."""
        pairs = pair_mask(mask)
        a = torch.stack([adj, 1.0 - adj], 1) * pairs.unsqueeze(1)
        stack, h = [a], x * mask.unsqueeze(-1)
        for gin, edge in zip(self.gins, self.edges, strict=True):
            h = gin(h, a, mask)
            a = edge(a, h, level, pairs)
            stack.append(a)
        e = torch.cat(stack, 1).permute(0, 2, 3, 1)  # [B, N, N, Σ channels]
        e = F.elu(self.score_hidden(e, level))
        e = F.elu(self.score_mid(e, level))
        return symmetric(self.score_out(e).squeeze(-1)) * pairs
