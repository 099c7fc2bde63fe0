"""optimus-eq's benchmark suite: models (:mod:`optimus_bench.models`), strategies as data
(:mod:`optimus_bench.strategies`), per-cell metrics (:mod:`optimus_bench.measure`), the matrix runner
(:mod:`optimus_bench.runner`) and its outputs (:mod:`optimus_bench.output`).

Run it as ``optimus-eq bench --models ... --strategies ... --modes ... --device cpu|cuda --out DIR``.
"""
