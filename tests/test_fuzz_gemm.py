"""The GEMM-heavy fuzzer (tests/fuzzing_gemm.py) in CI: a handful of programs, each optimized by both
strategies under the launch and the forward-only CUDA-graph cost model and compared with eager (values,
dtypes, strides, aliasing, requires_grad, gradients with None kept None: :func:`fuzzing.run_program`), and two
run as ``nn.Module`` s through the backend with parameter packing and SGD steps. Long runs:
``bench/fuzz_gemm.py``."""

from __future__ import annotations

import pytest

import fuzzing_gemm

#: programs with gemm_lhs groups, gated mixtures, experts, uneven splits, chains across cats, a shared
#: parameter, symbolic sizes (6) and post-grad capture (1)
SEEDS = [1, 2, 6, 10, 22]


def test_the_generator_makes_each_shape():
    features = set().union(*(fuzzing_gemm.generate(s).features for s in range(30)))
    assert {"gemm_lhs", "shared_param", "chain_across_cat", "gated", "uneven", "experts", "cross",
            "dynamic"} <= features


@pytest.mark.parametrize("seed", SEEDS)
def test_gemm_programs_match_eager(seed):
    program = fuzzing_gemm.generate(seed)
    results = fuzzing_gemm.run_gemm(program, ("greedy", "eqsat"), ("launch", "cudagraph_fwd"))
    bad = {k: o for k, o in results.items() if o.kind != "ok"}
    assert not bad, f"seed {seed}:\n{program.script()}\n{bad}"


@pytest.mark.parametrize("seed", [2, 14])
def test_gemm_modules_train_like_eager(seed):
    program = fuzzing_gemm.generate(seed, level="pre_grad")
    for strategy in ("greedy", "eqsat"):
        assert fuzzing_gemm.run_module(program, strategy, "cudagraph") is None, program.script(strategy)
