"""HuggingFace BERT built from its config, random weights, no download.

Source: J. Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding", NAACL 2019; code: ``transformers.BertModel`` (huggingface/transformers,
src/transformers/models/bert/modeling_bert.py). A real model nobody here wrote: its graph has the
fused-QKV-free attention, GELU MLPs and LayerNorms of a standard encoder, and few split/cat motifs, so it
shows what the optimizer costs (compile time) where it has little to remove.

Sizes: ``gpu`` is bert-base's layer shape (hidden 768, 12 heads, intermediate 3072, vocabulary 30522)
with 4 of its 12 layers (compile time scales with depth; the matrix must fit the device budget),
sequence length 128, batch 32. ``cpu`` is a 2-layer, hidden-64 toy. Dropout is off so that compiled
and eager runs are comparable.

Inputs: ``input_ids: [B, S]`` int64 and ``attention_mask: [B, S]`` int64 (the last quarter of every
other sequence padded). Output: ``last_hidden_state [B, S, H]``; the training loss is MSE against a
random target.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from optimus_bench.models.base import BenchCase, ModelUnavailable, mse_loss, randn, resolve_size, seeded

SIZES: dict[str, dict[str, Any]] = {
    "cpu": {"batch": 2, "seq_len": 32, "hidden": 64, "layers": 2, "heads": 2, "intermediate": 128, "vocab": 1000},
    "gpu": {"batch": 32, "seq_len": 128, "hidden": 768, "layers": 4, "heads": 12, "intermediate": 3072,
            "vocab": 30522},
}


class BertHidden(nn.Module):
    """``BertModel`` returning ``last_hidden_state`` only (a plain tensor output)."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def build(size: str | dict = "cpu", *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
          seed: int = 0, overrides: dict | None = None) -> BenchCase:
    """BERT at a size preset (``SIZES``) with example inputs and a regression target.

    Raises:
        ModelUnavailable: when ``transformers`` does not import here.
    """
    cfg = resolve_size(SIZES, size, overrides)
    try:
        import transformers
    except Exception as exc:  # ImportError, or a broken install
        raise ModelUnavailable(f"transformers does not import here ({type(exc).__name__}: {exc})") from exc
    config = transformers.BertConfig(
        vocab_size=cfg["vocab"], hidden_size=cfg["hidden"], num_hidden_layers=cfg["layers"],
        num_attention_heads=cfg["heads"], intermediate_size=cfg["intermediate"],
        max_position_embeddings=max(512, cfg["seq_len"]), hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0)
    with seeded(seed):
        model = BertHidden(transformers.BertModel(config, add_pooling_layer=False))
    gen = torch.Generator().manual_seed(seed + 1)
    b, s = cfg["batch"], cfg["seq_len"]
    ids = torch.randint(0, cfg["vocab"], (b, s), generator=gen).to(device)
    mask = torch.ones(b, s, dtype=torch.long)
    mask[1::2, s - s // 4:] = 0
    target = randn(gen, b, s, cfg["hidden"], device=device, dtype=dtype)
    return BenchCase("bert", model.to(device, dtype), (ids, mask.to(device)), target, mse_loss, b, cfg, dtype)
