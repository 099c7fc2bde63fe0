"""A small ranking model written the way a user writes one (not in the project's style): per-feature
towers over a dense input, a gate per feature, feature interactions, and an optional training loss.

Used by ``bench/html_report_check.py`` as a model file the optimizer was not written against:
``optimus-eq explain bench/user_models/ranking_tower.py:make``.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_FEATURES = 6
EMB = 16


class FeatureTower(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return F.relu(self.norm(self.fc(x)))


class RankingTower(nn.Module):
    def __init__(self, n=NUM_FEATURES, d=EMB):
        super().__init__()
        self.n, self.d = n, d
        self.towers = nn.ModuleList([FeatureTower(d) for _ in range(n)])
        self.gates = nn.Parameter(torch.ones(n))
        self.head = nn.Linear(n * d + n * (n - 1) // 2, 1)

    def forward(self, dense):
        # the usual preprocessing: split per feature, squash each, glue back, split again
        feats = dense.split(self.d, dim=1)
        squashed = torch.cat([torch.sigmoid(f) * 2 - 1 for f in feats], dim=1)
        outs = []
        for i, chunk in enumerate(torch.chunk(squashed, self.n, dim=1)):
            outs.append(self.towers[i](chunk) * self.gates[i])
        stacked = torch.stack(outs, dim=1)                      # [B, n, d]
        inter = torch.bmm(stacked, stacked.transpose(1, 2))     # [B, n, n]
        rows, cols = torch.triu_indices(self.n, self.n, offset=1)
        pairs = inter[:, rows, cols]
        flat = torch.cat([o for o in torch.unbind(stacked, dim=1)] + [pairs], dim=1)
        return self.head(flat)


def make():
    torch.manual_seed(0)
    return RankingTower().eval(), (torch.randn(32, NUM_FEATURES * EMB),)


def make_train():
    model, inputs = make()
    return model.train(), inputs, lambda out: out.pow(2).mean()
