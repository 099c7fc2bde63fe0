"""User-style models for the plan-regression gate: the shapes recommendation code is written in, small enough
for CPU, written the way users write them (per-feature loops over ``torch.split``, ``nn.ModuleList``s of
identical layers), not against this project's patterns.

>>> from optimus_bench.corpus import CORPUS
>>> model, inputs = CORPUS["tower_relu3"].build()

Each entry builds a fresh model in train mode (parameters require grad) and seeded inputs. The families:

* per-feature MLP towers (split the dense input by feature, a small MLP per feature, cat the outputs): 2-8
  layers, uneven widths, ReLU / GELU / tanh between layers, LayerNorm per layer;
* DCN cross layers (v1: ``x0 * (x . w) + b + x``; v2: ``x0 * (W x + b) + x``, arXiv:1708.05123, 2008.13535) beside a
  deep tower;
* multi-task heads: a shared bottom with one tower per task, and MMoE (experts, a softmax gate per task,
  arXiv KDD'18 "Modeling Task Relationships in Multi-task Learning with Multi-gate Mixture-of-Experts");
* embedding models: one ``nn.EmbeddingBag`` per sparse feature (sum pooling) and one ``nn.Embedding`` per
  feature, concatenated with a dense arch;
* a split/cat tangle: one dense input split, squashed piecewise, glued back and split again three ways;
* the README's examples: the demo model (``optimus_eq.demo.build_demo_model``) and the library example
  (``Sequential(Linear, Tanh)``), and ``bench/user_models/ranking_tower.py``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from optimus_eq.demo import build_demo_model

BATCH = 8


@dataclass(frozen=True)
class CorpusModel:
    """One model of the corpus: ``build() -> (model in train mode, example inputs)`` and what it is."""

    name: str
    build: Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]
    blurb: str


def _seeded(fn: Callable[[], tuple[nn.Module, tuple]]) -> Callable[[], tuple[nn.Module, tuple]]:
    def build():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model, inputs = fn()
        return model.train(), inputs
    return build


class FeatureTowers(nn.Module):
    """``n`` per-feature MLP towers over a dense input ``[B, n * widths[0]]``: feature i's slice goes through
    Linear layers of ``widths`` (an activation, and optionally a LayerNorm, between layers); the towers'
    outputs are concatenated: ``[B, n * widths[-1]]``."""

    def __init__(self, n: int = 6, widths: tuple[int, ...] = (16, 32, 32, 4), act: str = "relu",
                 layer_norm: bool = False):
        super().__init__()
        self.d, self.act = widths[0], getattr(F, act)
        self.layers = nn.ModuleList(nn.ModuleList(nn.Linear(a, b) for _ in range(n))
                                    for a, b in zip(widths, widths[1:]))
        self.norms = nn.ModuleList(nn.ModuleList(nn.LayerNorm(b) for _ in range(n)) for b in widths[1:-1]) \
            if layer_norm else None

    def forward(self, x):
        outs = []
        for i, h in enumerate(torch.split(x, self.d, dim=1)):
            for j, layer in enumerate(self.layers):
                h = layer[i](h)
                if j < len(self.layers) - 1:
                    if self.norms is not None:
                        h = self.norms[j][i](h)
                    h = self.act(h)
            outs.append(h)
        return torch.cat(outs, dim=1)


class ModuleListTowers(nn.Module):
    """Towers as users often write them: three ``ModuleList``s, one comprehension over the split."""

    def __init__(self, n: int = 6, d: int = 16, h: int = 32):
        super().__init__()
        self.d = d
        self.l1 = nn.ModuleList([nn.Linear(d, h) for _ in range(n)])
        self.l2 = nn.ModuleList([nn.Linear(h, h) for _ in range(n)])
        self.l3 = nn.ModuleList([nn.Linear(h, 4) for _ in range(n)])

    def forward(self, x):
        return torch.cat([self.l3[i](torch.relu(self.l2[i](torch.relu(self.l1[i](p)))))
                          for i, p in enumerate(torch.split(x, self.d, 1))], 1)


class UnevenSplitTowers(nn.Module):
    """Towers over features of different widths (an uneven ``torch.split``): towers of equal input width batch
    together, the others stay apart."""

    def __init__(self, sizes: tuple[int, ...] = (8, 8, 16, 8, 16, 8, 8), hidden: int = 16):
        super().__init__()
        self.sizes = list(sizes)
        self.l1 = nn.ModuleList(nn.Linear(s, hidden) for s in sizes)
        self.l2 = nn.ModuleList(nn.Linear(hidden, 4) for _ in sizes)

    def forward(self, x):
        return torch.cat([self.l2[i](F.relu(self.l1[i](p))) for i, p in enumerate(torch.split(x, self.sizes, 1))], 1)


class CrossNet(nn.Module):
    """DCN: ``layers`` cross layers beside a deep tower, then a head. v1: ``x_{l+1} = x0 * (x_l . w_l) + b_l + x_l``;
    v2: ``x_{l+1} = x0 * (W_l x_l + b_l) + x_l``."""

    def __init__(self, d: int = 32, layers: int = 3, v2: bool = False):
        super().__init__()
        self.v2 = v2
        if v2:
            self.cross = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        else:
            self.w = nn.ParameterList(nn.Parameter(torch.randn(d, 1) * 0.1) for _ in range(layers))
            self.b = nn.ParameterList(nn.Parameter(torch.zeros(d)) for _ in range(layers))
        self.deep = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
        self.head = nn.Linear(d + 32, 1)

    def forward(self, x0):
        x = x0
        if self.v2:
            for layer in self.cross:
                x = x0 * layer(x) + x
        else:
            for w, b in zip(self.w, self.b):
                x = x0 * (x @ w) + b + x
        return self.head(torch.cat([x, self.deep(x0)], dim=1))


class SharedBottom(nn.Module):
    """Multi-task heads: a shared bottom MLP, then one two-layer tower per task, outputs stacked ``[B, tasks]``."""

    def __init__(self, d: int = 32, tasks: int = 6, hidden: int = 16):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
        self.towers = nn.ModuleList(nn.Sequential(nn.Linear(32, hidden), nn.ReLU(), nn.Linear(hidden, 1))
                                    for _ in range(tasks))

    def forward(self, x):
        h = self.bottom(x)
        return torch.cat([torch.sigmoid(t(h)) for t in self.towers], dim=1)


class MMoE(nn.Module):
    """Multi-gate mixture of experts: ``experts`` expert MLPs of one input, a softmax gate per task, a tower per
    task."""

    def __init__(self, d: int = 32, experts: int = 5, tasks: int = 5, hidden: int = 16):
        super().__init__()
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, hidden), nn.ReLU()) for _ in range(experts))
        self.gates = nn.ModuleList(nn.Linear(d, experts) for _ in range(tasks))
        self.towers = nn.ModuleList(nn.Linear(hidden, 1) for _ in range(tasks))

    def forward(self, x):
        e = torch.stack([f(x) for f in self.experts], dim=1)                  # [B, E, H]
        outs = []
        for gate, tower in zip(self.gates, self.towers):
            g = torch.softmax(gate(x), dim=-1).unsqueeze(-1)                  # [B, E, 1]
            outs.append(tower((g * e).sum(dim=1)))
        return torch.cat(outs, dim=1)


class EmbeddingBagModel(nn.Module):
    """One ``nn.EmbeddingBag`` (sum) per sparse feature, concatenated with a dense arch, then an MLP.
    Inputs: dense ``[B, 16]``, then per feature flat ids ``[B * 3]`` and offsets ``[B]``."""

    def __init__(self, features: int = 6, rows: int = 50, dim: int = 8):
        super().__init__()
        self.bags = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(features))
        self.dense = nn.Linear(16, dim)
        self.top = nn.Sequential(nn.Linear(dim * (features + 1), 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, dense, *sparse):
        pooled = [bag(sparse[2 * i], sparse[2 * i + 1]) for i, bag in enumerate(self.bags)]
        return self.top(torch.cat([F.relu(self.dense(dense))] + pooled, dim=1))


class EmbeddingModel(nn.Module):
    """One ``nn.Embedding`` per categorical feature (ids ``[B, features]``), each mean-pooled over nothing (one id
    per row), projected per feature, concatenated."""

    def __init__(self, features: int = 6, rows: int = 40, dim: int = 8):
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(rows, dim) for _ in range(features))
        self.proj = nn.ModuleList(nn.Linear(dim, dim) for _ in range(features))

    def forward(self, ids):
        return torch.cat([torch.tanh(p(t(i))) for t, p, i in zip(self.tables, self.proj, torch.unbind(ids, 1))], 1)


class SplitCatTangle(nn.Module):
    """Split, squash piecewise, cat, split again (chunk, unbind of a view, uneven split), with a Linear on the
    glued result: the junk a feature pipeline accumulates."""

    def __init__(self, n: int = 8, d: int = 8):
        super().__init__()
        self.n, self.d = n, d
        self.proj = nn.Linear(n * d, n * d)

    def forward(self, x):
        a = torch.cat([torch.sigmoid(p) for p in torch.split(x, self.d, 1)], 1)
        b = torch.cat([torch.tanh(p) for p in torch.chunk(a, self.n, 1)], 1)
        c = torch.stack(torch.unbind(b.view(-1, self.n, self.d), 1), 1).flatten(1)
        first, rest = torch.split(c, [self.d, (self.n - 1) * self.d], 1)
        return self.proj(torch.cat([F.relu(first), rest], 1)) + x


def _towers(**kw) -> Callable:
    def fn():
        model = FeatureTowers(**kw)
        return model, (torch.randn(BATCH, 6 * model.d),)
    return fn


def _embedding_bag():
    model = EmbeddingBagModel()
    sparse = []
    for _ in model.bags:
        sparse += [torch.randint(0, 50, (BATCH * 3,)), torch.arange(0, BATCH * 3, 3)]
    return model, (torch.randn(BATCH, 16), *sparse)


def _demo():
    model, inputs = build_demo_model(num_fields=8, dim=8, batch=BATCH)
    return model, inputs


def _ranking_tower():
    path = Path(__file__).resolve().parents[1] / "user_models" / "ranking_tower.py"
    spec = importlib.util.spec_from_file_location("ranking_tower", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model, inputs = mod.make()
    return model, inputs


_ENTRIES = [
    ("tower_relu3", lambda: (ModuleListTowers(), (torch.randn(BATCH, 96),)), "6 towers of 3 Linears with ReLU, three ModuleLists"),
    ("tower_2layer", _towers(widths=(16, 32, 4)), "6 towers of 2 Linears"),
    ("tower_8layer", _towers(widths=(16,) + (24,) * 7 + (4,)), "6 towers of 8 Linears"),
    ("tower_uneven_widths", _towers(widths=(16, 64, 16, 8)), "6 towers, layer widths 16-64-16-8"),
    ("tower_gelu", _towers(act="gelu"), "6 towers of 3 Linears with GELU (opaque at Torch-IR)"),
    ("tower_tanh", _towers(act="tanh"), "6 towers of 3 Linears with tanh"),
    ("tower_layernorm", _towers(layer_norm=True), "6 towers of 3 Linears, LayerNorm + ReLU per layer"),
    ("tower_layernorm_gelu", _towers(layer_norm=True, act="gelu"), "6 towers, LayerNorm + GELU per layer"),
    ("tower_uneven_split", lambda: (UnevenSplitTowers(), (torch.randn(BATCH, 72),)),
     "7 towers over an uneven split (widths 8 and 16)"),
    ("dcn_v1", lambda: (CrossNet(), (torch.randn(BATCH, 32),)), "DCN: 3 cross layers (v1) and a deep tower"),
    ("dcn_v2", lambda: (CrossNet(v2=True), (torch.randn(BATCH, 32),)), "DCN-v2: 3 cross layers and a deep tower"),
    ("shared_bottom", lambda: (SharedBottom(), (torch.randn(BATCH, 32),)), "shared bottom, 6 task towers"),
    ("mmoe", lambda: (MMoE(), (torch.randn(BATCH, 32),)), "MMoE: 5 experts, 5 gated tasks"),
    ("embedding_bags", _embedding_bag, "6 EmbeddingBags (sum) + dense arch + MLP"),
    ("embeddings", lambda: (EmbeddingModel(), (torch.randint(0, 40, (BATCH, 6)),)),
     "6 Embeddings, a projection per feature"),
    ("split_cat_tangle", lambda: (SplitCatTangle(), (torch.randn(BATCH, 64),)), "split/chunk/unbind/cat tangle"),
    ("readme_demo", _demo, "the README's demo model (8 fields of 8)"),
    ("readme_library", lambda: (nn.Sequential(nn.Linear(16, 16), nn.Tanh()), (torch.randn(4, 16),)),
     "the README's library example"),
    ("ranking_tower", _ranking_tower, "bench/user_models/ranking_tower.py"),
]

#: name -> :class:`CorpusModel`
CORPUS: dict[str, CorpusModel] = {name: CorpusModel(name, _seeded(fn), blurb) for name, fn, blurb in _ENTRIES}
