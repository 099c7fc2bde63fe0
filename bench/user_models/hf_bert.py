"""A tiny HuggingFace BERT (random weights, nothing downloaded): model code the optimizer was not written
against. ``optimus-eq explain bench/user_models/hf_bert.py:make`` (needs ``transformers``)."""
import torch
import transformers


def make():
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=128, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.BertModel(cfg).eval()
    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 10:] = 0
    return model, (ids, mask)
