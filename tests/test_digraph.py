"""optimus_eq.digraph against scipy.sparse.csgraph: the same masks, the same component labels (numbering
included: the extraction iterates in label order), the same compressed arrays, on random graphs with cycles,
self-loops and duplicate edges."""

import numpy as np
import pytest

from optimus_eq import digraph

scipy_sparse = pytest.importorskip("scipy.sparse")
csgraph = pytest.importorskip("scipy.sparse.csgraph")


def _graph(seed: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    m = int(rng.integers(0, 4 * n))
    if seed % 3 == 0:  # mostly a DAG (edges to larger nodes), a few back edges: the e-graphs' shape
        src = rng.integers(0, n, m)
        dst = np.minimum(src + rng.integers(0, 5, m), n - 1)
        back = rng.random(m) < 0.05
        src[back], dst[back] = dst[back], src[back]
    else:
        src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    return n, src.astype(np.int64), dst.astype(np.int64)


def _csr(n, src, dst):
    return scipy_sparse.csr_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(n, n))


@pytest.mark.parametrize("seed", range(300))
def test_components_and_reach_match_scipy(seed, monkeypatch):
    n, src, dst = _graph(seed)
    # the Python search, even though this process has scipy.sparse.csgraph loaded
    monkeypatch.setattr(digraph, "sys", type("S", (), {"modules": {}})())
    want = csgraph.connected_components(_csr(n, src, dst), directed=True, connection="strong")[1]
    got = digraph.strong_components(n, src, dst)
    assert got.tolist() == want.tolist()
    want = csgraph.connected_components(_csr(n, src, dst), directed=False)[1]
    assert digraph.weak_components(n, src, dst).tolist() == want.tolist()
    rng = np.random.default_rng(seed + 1000)
    roots = rng.integers(0, n, int(rng.integers(1, 4))).tolist()
    r = np.asarray(roots)
    g = _csr(n + 1, np.concatenate([src, np.full(len(r), n)]), np.concatenate([dst, r]))
    mask = np.zeros(n + 1, dtype=bool)
    mask[csgraph.breadth_first_order(g, n, directed=True, return_predecessors=False)] = True
    assert digraph.reachable(n, src, dst, roots).tolist() == mask[:n].tolist()


@pytest.mark.parametrize("seed", range(50))
def test_compressed_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    rows_n, cols_n = int(rng.integers(1, 20)), int(rng.integers(1, 20))
    m = int(rng.integers(0, 60))
    rows, cols = rng.integers(0, rows_n, m), rng.integers(0, cols_n, m)
    vals = rng.normal(size=m)
    a = scipy_sparse.csc_matrix((vals, (rows, cols)), shape=(rows_n, cols_n))
    indptr, indices, data = digraph.compressed(cols_n, cols, rows, vals)
    assert indptr.tolist() == a.indptr.tolist()
    assert indices.tolist() == a.indices.tolist()
    np.testing.assert_allclose(data, a.data, rtol=0, atol=1e-12)


def test_large_graphs_use_scipy_with_the_same_labels(monkeypatch):
    n, src, dst = _graph(3)
    monkeypatch.setattr(digraph, "sys", type("S", (), {"modules": {}})())
    mine = digraph.strong_components(n, src, dst)
    monkeypatch.setattr(digraph, "SCIPY_ABOVE", 0)
    assert digraph.strong_components(n, src, dst).tolist() == mine.tolist()


def test_empty_graphs_and_no_roots(monkeypatch):
    monkeypatch.setattr(digraph, "sys", type("S", (), {"modules": {}})())
    none = np.zeros(0, dtype=np.int64)
    assert digraph.strong_components(0, none, none).tolist() == []
    assert digraph.weak_components(0, none, none).tolist() == []
    assert digraph.reachable(0, none, none, []).tolist() == []
    assert digraph.reachable(3, np.array([0]), np.array([1]), []).tolist() == [False, False, False]
    assert digraph.strong_components(3, none, none).tolist() == \
        csgraph.connected_components(_csr(3, none, none), directed=True, connection="strong")[1].tolist()
