"""End to end through torch.compile: a small HuggingFace BERT (random weights, no download) with the
optimized graph run eagerly (``compile=False``), and a few real Inductor compiles (marked slow)."""

from __future__ import annotations

import warnings

import pytest
import torch

import optimus_eq
from conftest import STRATEGIES
import oracle


def _bert():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=128, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.BertModel(cfg).eval()
    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 10:] = 0
    return model, ids, mask


def _reports_ok():
    reports = list(optimus_eq.last_reports)
    assert reports, "the optimizer never ran"
    for r in reports:
        assert r.fallback is None, r.fallback
    return reports


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_bert_forward_matches_eager(strategy):
    model, ids, mask = _bert()
    with torch.no_grad():
        ref64 = oracle.float64_reference(lambda m, i, a: m(input_ids=i, attention_mask=a).last_hidden_state,
                                         [ids, mask], module=model)
        expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
    torch._dynamo.reset()
    optimus_eq.last_reports.clear()
    compiled = torch.compile(model, backend=optimus_eq.backend(strategy=strategy, compile=False))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="optimus_eq")
        with torch.no_grad():
            out = compiled(input_ids=ids, attention_mask=mask).last_hidden_state
    assert ref64.why_not is None, ref64.why_not
    oracle.assert_values(out, expected, ref64.outputs[0])  # fused QKV / batched layer norms reorder sums
    assert out.stride() == expected.stride()
    reports = _reports_ok()
    assert all(r.strategy == strategy for r in reports)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_bert_backward_matches_eager(strategy):
    model, ids, mask = _bert()
    ref64 = oracle.float64_reference(lambda m, i, a: m(input_ids=i, attention_mask=a).last_hidden_state.square().mean(),
                                     [ids, mask], module=model)
    grads64 = ref64.grads(lambda outs: outs[0], list(model.parameters()))
    loss = model(input_ids=ids, attention_mask=mask).last_hidden_state.square().mean()
    expected = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    torch._dynamo.reset()
    optimus_eq.last_reports.clear()
    compiled = torch.compile(model, backend=optimus_eq.backend(strategy=strategy, compile=False))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="optimus_eq")
        loss = compiled(input_ids=ids, attention_mask=mask).last_hidden_state.square().mean()
    actual = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    for (name, _), a, e, r in zip(model.named_parameters(), actual, expected, grads64):
        if e is None:
            assert a is None, name
        else:
            assert a is not None, name
            oracle.assert_values(a, e, r, f"grad of {name}", grad=True)
    _reports_ok()


# -- real Inductor compiles (C++ on CPU: seconds each, cached across runs) ----------------------------

class SplitCatModel(torch.nn.Module):
    """Split/cat junk around a Linear: every junk op folds away."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        h = torch.cat([p.tanh() for p in torch.split(x, 4, 1)], 1)
        v = torch.stack(torch.unbind(h.view(-1, 4, 4), 1), 1).reshape(-1, 16)
        a, b = torch.chunk(v, 2, 1)
        return self.lin(torch.cat([a, b], 1)) + x


def _inductor_run(backend, x):
    model = SplitCatModel().eval()
    torch._dynamo.reset()
    optimus_eq.last_reports.clear()
    compiled = torch.compile(model, backend=backend)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="optimus_eq")
        with torch.no_grad():
            ref64 = oracle.float64_reference(model, [x])
            out = compiled(x)
            expected = model(x)
    oracle.assert_values(out, expected, ref64.outputs[0])  # Inductor's own kernels reorder sums too
    return _reports_ok()


@pytest.mark.slow
def test_inductor_compile_eqsat_split_cat_model():
    (report,) = _inductor_run(optimus_eq.backend(strategy="eqsat"), torch.randn(8, 16))
    for op in ("split", "chunk", "unbind", "getitem", "cat", "stack"):
        assert report.ops_after.get(op, 0) == 0, dict(report.ops_after)
    assert report.ops_after.get("tanh", 0) == 1


@pytest.mark.slow
def test_inductor_compile_registered_backend_name():
    """``backend="optimus_eq"`` resolves through the torch_dynamo_backends entry point."""
    (report,) = _inductor_run("optimus_eq", torch.randn(4, 16))
    assert report.strategy == "eqsat"
