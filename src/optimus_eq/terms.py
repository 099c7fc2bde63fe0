"""The term language: egglog sorts for tensor programs, and the analyses every pattern may query.

A tensor value is an e-class of sort ``T``. The vocabulary is a small algebra (DESIGN.md, principle 2):

==============================  ==========================================================================
constructor                     meaning (shapes: x is [.., n, ..] with n at dim d)
==============================  ==========================================================================
``(Leaf key)``                  a graph input or an op outside the vocabulary with no tensor inputs
``(Apply key args)``            an op with tensor inputs ``args`` (an ``Args`` list); ``key`` (an integer
                                interned by the bridge) names the op and its non-tensor attributes. Opaque ops get a key unique to their FX
                                node, so they never merge; pure ops (linear, mm, layer_norm, ...) share
                                keys, which is common-subexpression elimination.
``(Narrow x d s l n)``          ``x.narrow(d, s, l)``; n is x's size at d (kept so that guards need no
                                shape lookup). A split / chunk output and a basic slice are narrows.
``(Select x d i n)``            ``x.select(d, i)``: an unbind output or an integer index.
``(Cat list)``                  ``torch.cat`` of a ``TL`` list; the cat dim lives in each ``Cons``.
``(Unsqueeze x d)``             ``x.unsqueeze(d)``; ``stack(xs, d)`` is ``Cat`` of ``Unsqueeze(x, d)``.
``(Reshape x shape)``           view / reshape / flatten / unflatten / squeeze to the static ``shape``.
``(Permute x perm)``            permute / transpose / movedim / t.
``(Unary key x)``               a pointwise op of one tensor (relu, tanh, x*2.0, clamp, ...).
``(Binary key x y)``            a pointwise op of two tensors (add, mul, ...).
``(NodeOf id)``                 bookkeeping, not a term: unioned with the term of FX node ``id`` so that
                                its e-class can be found after saturation; never extracted.
==============================  ==========================================================================

``TL`` lists: ``(Cons d x rest)`` is the concatenation along ``d`` of ``x`` and ``rest``; ``(Nil)`` is empty.
A list e-class therefore stands for one concatenated tensor, which is what makes n-ary cat rules local.

Analyses (run with every pattern, see :data:`ANALYSIS_RULES`):

* ``(shape x)``: the static shape of x as ``(Vec i64)``, seeded from FX meta for every translated node
  and derived for terms the rules create.
* ``(RunEnd L x d s)`` / ``(RunRest L x d s e)``: for a list ``L`` whose head is a narrow of ``x`` along ``d``
  starting at ``s``, the end offset of the longest run of adjacent narrows of ``x`` at the front of ``L``,
  and the list after that run. Computed with pointer jumping (O(log n) iterations, O(n log n) rows),
  keyed by (base, dim, start) so narrows of one tensor at other offsets never merge by mistake
  (../shared/EGGLOG_NOTES.md: pairwise merging of n-ary cats creates 2^(n-1) e-nodes; runs do not).
"""

from __future__ import annotations

SCHEMA = """
(sort IVec (Vec i64))
(datatype*
  (T
    (Leaf i64)
    (Apply i64 Args)
    (Narrow T i64 i64 i64 i64)
    (Select T i64 i64 i64)
    (Cat TL)
    (Unsqueeze T i64)
    (Reshape T IVec)
    (Permute T IVec)
    (Unary i64 T)
    (Binary i64 T T)
    (NodeOf i64))
  (TL (Nil) (Cons i64 T TL))
  (Args (ANil) (ACons T Args)))
(function shape (T) IVec :merge old)
(function RunEnd (TL T i64 i64) i64 :merge (max old new))
(constructor RunRest (TL T i64 i64 i64) TL)
(ruleset analysis)
"""

#: Constructors of the e-graph that denote program terms (everything else in a serialized e-graph is
#: an analysis row or a primitive).
CONSTRUCTORS = frozenset(
    ["Leaf", "Apply", "Narrow", "Select", "Cat", "Unsqueeze", "Reshape", "Permute", "Unary", "Binary",
     "Nil", "Cons", "ANil", "ACons"]
)

#: Rules of the always-on ``analysis`` ruleset: shape propagation and adjacent-narrow runs.
ANALYSIS_RULES = """
(rule ((= t (Narrow x d s l n)) (= sh (shape x))) ((set (shape t) (vec-set sh d l)))
      :ruleset analysis :name "shape/narrow")
(rule ((= t (Select x d i n)) (= sh (shape x))) ((set (shape t) (vec-remove sh d)))
      :ruleset analysis :name "shape/select")
(rule ((= t (Unary f x)) (= sh (shape x))) ((set (shape t) sh))
      :ruleset analysis :name "shape/unary")
(rule ((= t (Binary f x y)) (= sh (shape x)) (= sh (shape y))) ((set (shape t) sh))
      :ruleset analysis :name "shape/binary")
(rule ((= t (Reshape x sh))) ((set (shape t) sh))
      :ruleset analysis :name "shape/reshape")
(rule ((= t (Cat (Cons d x (Nil)))) (= sh (shape x))) ((set (shape t) sh))
      :ruleset analysis :name "shape/cat1")

(rule ((= L (Cons d (Narrow x d s l n) R)))
      ((set (RunEnd L x d s) (+ s l)) (union (RunRest L x d s (+ s l)) R))
      :ruleset analysis :name "run/head")
(rule ((= e (RunEnd L x d s)) (= R (RunRest L x d s e))
       (= e2 (RunEnd R x d e)) (= R2 (RunRest R x d e e2)))
      ((set (RunEnd L x d s) e2) (union (RunRest L x d s e2) R2))
      :ruleset analysis :name "run/jump")
"""
