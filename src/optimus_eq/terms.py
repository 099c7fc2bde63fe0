"""The term language: egglog sorts for tensor programs, and the analyses every pattern may query.

A tensor value is an e-class of sort ``T``. The vocabulary is a small algebra (the starting design's principle 2):

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
``(NodeOf id)``                 a handle, not a term: unioned with the term the bridge numbered ``id``,
                                so that rows can refer to terms and e-classes can be found after
                                saturation; never extracted (likewise ``ListOf`` and ``ArgsOf``).
==============================  ==========================================================================

``TL`` lists: ``(Cons d x rest)`` is the concatenation along ``d`` of ``x`` and ``rest``; ``(Nil)`` is empty.
A list e-class therefore stands for one concatenated tensor, which is what makes n-ary cat rules local.

Analyses (run with every pattern, see :data:`ANALYSIS_RULES`):

* ``(shape x)``: the shape of x as ``(Vec i64)``, seeded from FX meta for every translated node
  and derived for terms the rules create. A symbolic size (the batch dim under ``dynamic=True``) is a
  negative token (:mod:`optimus_eq.symbolic`): rules compare and copy it, and every rule that computes
  with a size guards it ``>= 0``.
* ``(prefix sh k)``: the product of the first ``k`` sizes of the shape ``sh`` (``0 <= k <= rank``; so
  ``(prefix sh rank)`` is the element count), for every shape of a term, up to its first symbolic size. Rules that move views across
  a narrow compare the element counts before and after a dim with it.
* ``(RunEnd L x d s)`` / ``(RunRest L x d s e)``: for a list ``L`` whose head is a narrow of ``x`` along ``d``
  starting at ``s``, the end offset of the longest run of adjacent narrows of ``x`` at the front of ``L``,
  and the list after that run. Computed with pointer jumping (O(log n) iterations; each jump deletes the row it leaves: n rows),
  keyed by (base, dim, start) so narrows of one tensor at other offsets never merge by mistake
  (../shared/EGGLOG_NOTES.md: pairwise merging of n-ary cats creates 2^(n-1) e-nodes; runs do not).
  A jump must move the end forward: after a zero-length narrow two different rests share one (s, e), and
  joining them made ``Cons(d, piece, T)`` equal to ``T``, down to a ``Cat`` of the empty list, which
  cannot be lowered (found by fuzzing: zero-size tensors in a cat).
* ``(CatOffset L C d o)``: for a list ``L`` that some narrow along ``d`` reads as ``Narrow(Cat(L), d, ..)``,
  the cell ``C`` of ``L`` starts at offset ``o`` along ``d``. Seeded only by narrowed cats, so a cat of n
  inputs costs n rows, and a narrow finds the input it starts at by an equality join on ``o``. The walk
  along ``L`` steps by ``Hop``s of up to 8 cells, so a cat of n inputs takes about n / 8 + 3 iterations
  of the analyses, not n: each iteration costs egglog 1-4 ms at 10^5 e-nodes however few facts it adds,
  and a stack of 512 branches took 513 iterations (1.8 s of 10 s, branches 20k).
* ``(Hop C d k m R)``: ``R`` is the list after the first ``2^k`` cells of ``C`` along ``d`` (``k <= 3``),
  which are ``m`` long along ``d`` (all of static size). Every ``Cons`` of static size gets ``k = 0``; longer
  hops join two of the level below (pointer jumping, at most 4 rows per cell).
* ``(OtherRunEnd L x d c l s)`` / ``(OtherRunRest L x d c l s e)``: the runs of ``RunEnd`` for a list along
  ``c`` whose cells are narrows of x along another dim ``d != c``, all of one length ``l > 0`` (the pieces
  of an equal split concatenated along another dim), starting at ``s``; same pointer jumping.
* ``(ReshapeRunEnd L x d c l v s)`` / ``(ReshapeRunRest L x d c l v s e)``: likewise for a stack along ``c``
  whose cells are ``Unsqueeze(Reshape(Narrow(x, d, s, l, n), v), c)``: equal split pieces each reshaped to
  the same shape ``v`` and stacked (upstream's move_reshape_out_of_split_stack).
"""

from __future__ import annotations

#: Longest shape the e-graph handles (shape vectors are built per rank by generated rules).
MAX_RANK = 8

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
  (TL (Nil) (Cons i64 T TL) (ListOf i64))
  (Args (ANil) (ACons T Args) (ArgsOf i64)))
(function shape (T) IVec :merge old)
(function prefix (IVec i64) i64 :merge old)
(function RunEnd (TL T i64 i64) i64 :merge (max old new))
(constructor RunRest (TL T i64 i64 i64) TL)
(relation CatOffset (TL TL i64 i64))
(relation Hop (TL i64 i64 i64 TL))
(function OtherRunEnd (TL T i64 i64 i64 i64) i64 :merge (max old new))
(constructor OtherRunRest (TL T i64 i64 i64 i64 i64) TL)
(function ReshapeRunEnd (TL T i64 i64 i64 IVec i64) i64 :merge (max old new))
(constructor ReshapeRunRest (TL T i64 i64 i64 IVec i64 i64) TL)
(ruleset analysis)
""" + "".join(f"(relation Vec{k}In ({' '.join(['i64'] * (k + 1))}))\n" for k in range(9)) + """
(function VecOf (i64) IVec :merge old)
(function MovePerm (i64 i64 i64) IVec :merge old)
(relation LeafIn (i64 i64))
(relation ApplyIn (i64 i64 i64))
(relation NarrowIn (i64 i64 i64 i64 i64 i64))
(relation SelectIn (i64 i64 i64 i64 i64))
(relation CatIn (i64 i64))
(relation UnsqueezeIn (i64 i64 i64))
(relation ReshapeIn (i64 i64 i64))
(relation PermuteIn (i64 i64 i64))
(relation UnaryIn (i64 i64 i64))
(relation BinaryIn (i64 i64 i64 i64))
(relation ConsIn (i64 i64 i64 i64))
(relation NilIn (i64))
(relation AConsIn (i64 i64 i64))
(relation ANilIn (i64))
(relation ShapeIn (i64 i64))
(relation UnionIn (i64 i64))
(relation SubsumeUnaryIn (i64 i64))
(relation SubsumeBinaryIn (i64 i64 i64))
(relation SubsumeApplyIn (i64 i64))
(ruleset load_vec)
(ruleset load)
"""

def _moveperm(rank: int, src: int, dst: int) -> list[int]:
    order = [d for d in range(rank) if d != src]
    order.insert(dst, src)
    return order


#: Static table: ``(MovePerm rank src dst)`` is the permutation of ``torch.movedim(x, src, dst)``.
MOVEPERM_ROWS = "".join(
    f"(set (MovePerm {r} {a} {b}) (vec-of {' '.join(map(str, _moveperm(r, a, b)))}))\n"
    for r in range(1, MAX_RANK + 1) for a in range(r) for b in range(r)
)

#: Rules that build terms from the bridge's integer rows (one pass of ``load_vec``, then of ``load``).
#: ``UnionIn(a, b)`` joins the classes of two handles (a horizontal fusion's alternative and its member);
#: ``Subsume{Unary,Binary,Apply}In`` remove one e-node (greedy's destructive horizontal fusion).
LOAD_RULES = "".join(
    f"(rule ((Vec{k}In v {' '.join(f'a{i}' for i in range(k))})) "
    f"((set (VecOf v) (vec-of {' '.join(f'a{i}' for i in range(k))}))) :ruleset load_vec)\n"
    for k in range(9)
) + """
(rule ((LeafIn i k)) ((union (NodeOf i) (Leaf k))) :ruleset load)
(rule ((ApplyIn i k a)) ((union (NodeOf i) (Apply k (ArgsOf a)))) :ruleset load)
(rule ((NarrowIn i x d s l n)) ((union (NodeOf i) (Narrow (NodeOf x) d s l n))) :ruleset load)
(rule ((SelectIn i x d j n)) ((union (NodeOf i) (Select (NodeOf x) d j n))) :ruleset load)
(rule ((CatIn i l)) ((union (NodeOf i) (Cat (ListOf l)))) :ruleset load)
(rule ((UnsqueezeIn i x d)) ((union (NodeOf i) (Unsqueeze (NodeOf x) d))) :ruleset load)
(rule ((ReshapeIn i x v) (= sv (VecOf v))) ((union (NodeOf i) (Reshape (NodeOf x) sv))) :ruleset load)
(rule ((PermuteIn i x v) (= sv (VecOf v))) ((union (NodeOf i) (Permute (NodeOf x) sv))) :ruleset load)
(rule ((UnaryIn i k x)) ((union (NodeOf i) (Unary k (NodeOf x)))) :ruleset load)
(rule ((BinaryIn i k x y)) ((union (NodeOf i) (Binary k (NodeOf x) (NodeOf y)))) :ruleset load)
(rule ((ConsIn l d x r)) ((union (ListOf l) (Cons d (NodeOf x) (ListOf r)))) :ruleset load)
(rule ((NilIn l)) ((union (ListOf l) (Nil))) :ruleset load)
(rule ((AConsIn l x r)) ((union (ArgsOf l) (ACons (NodeOf x) (ArgsOf r)))) :ruleset load)
(rule ((ANilIn l)) ((union (ArgsOf l) (ANil))) :ruleset load)
(rule ((ShapeIn i v) (= sv (VecOf v))) ((set (shape (NodeOf i)) sv)) :ruleset load)
(rule ((UnionIn a b)) ((union (NodeOf a) (NodeOf b))) :ruleset load)
(rule ((SubsumeUnaryIn k x)) ((subsume (Unary k (NodeOf x)))) :ruleset load)
(rule ((SubsumeBinaryIn k x y)) ((subsume (Binary k (NodeOf x) (NodeOf y)))) :ruleset load)
(rule ((SubsumeApplyIn k a)) ((subsume (Apply k (ArgsOf a)))) :ruleset load)
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
(rule ((= sh (shape x))) ((set (prefix sh 0) 1)) :ruleset analysis :name "prefix/seed")
(rule ((= p (prefix sh k)) (< k (vec-length sh)) (>= (vec-get sh k) 0)) ((set (prefix sh (+ k 1)) (* p (vec-get sh k))))
      :ruleset analysis :name "prefix/step")
""" + "".join(
    f"(rule ((= t (Permute x p)) (= sh (shape x)) (= (vec-length p) {r})) "
    f"((set (shape t) (vec-of {' '.join(f'(vec-get sh (vec-get p {i}))' for i in range(r))}))) "
    f":ruleset analysis :name \"shape/permute{r}\")\n"
    for r in range(1, MAX_RANK + 1)
) + """
(rule ((= t (Narrow (Cat L) d s l n))) ((CatOffset L L d 0))
      :ruleset analysis :name "catoffset/seed")
(rule ((= C (Cons d x R)) (= shx (shape x)) (>= (vec-get shx d) 0)) ((Hop C d 0 (vec-get shx d) R))
      :ruleset analysis :name "hop/base")
(rule ((Hop C d k m R) (< k 3) (Hop R d k m2 R2)) ((Hop C d (+ k 1) (+ m m2) R2))
      :ruleset analysis :name "hop/double")
(rule ((CatOffset L C d o) (Hop C d k m R)) ((CatOffset L R d (+ o m)))
      :ruleset analysis :name "catoffset/hop")
(rule ((= L (Cons d (Narrow x d s l n) R)))
      ((set (RunEnd L x d s) (+ s l)) (union (RunRest L x d s (+ s l)) R))
      :ruleset analysis :name "run/head")
(rule ((= e (RunEnd L x d s)) (= R (RunRest L x d s e))
       (= e2 (RunEnd R x d e)) (> e2 e) (= R2 (RunRest R x d e e2)))
      ((set (RunEnd L x d s) e2) (union (RunRest L x d s e2) R2) (delete (RunRest L x d s e)))
      :ruleset analysis :name "run/jump")
(rule ((= L (Cons c (Narrow x d s l n) R)) (!= c d) (> l 0))
      ((set (OtherRunEnd L x d c l s) (+ s l)) (union (OtherRunRest L x d c l s (+ s l)) R))
      :ruleset analysis :name "otherrun/head")
(rule ((= e (OtherRunEnd L x d c l s)) (= R (OtherRunRest L x d c l s e))
       (= e2 (OtherRunEnd R x d c l e)) (> e2 e) (= R2 (OtherRunRest R x d c l e e2)))
      ((set (OtherRunEnd L x d c l s) e2) (union (OtherRunRest L x d c l s e2) R2) (delete (OtherRunRest L x d c l s e)))
      :ruleset analysis :name "otherrun/jump")
(rule ((= L (Cons c (Unsqueeze (Reshape (Narrow x d s l n) v) c) R)) (> l 0))
      ((set (ReshapeRunEnd L x d c l v s) (+ s l)) (union (ReshapeRunRest L x d c l v s (+ s l)) R))
      :ruleset analysis :name "reshaperun/head")
(rule ((= e (ReshapeRunEnd L x d c l v s)) (= R (ReshapeRunRest L x d c l v s e))
       (= e2 (ReshapeRunEnd R x d c l v e)) (> e2 e) (= R2 (ReshapeRunRest R x d c l v e e2)))
      ((set (ReshapeRunEnd L x d c l v s) e2) (union (ReshapeRunRest L x d c l v s e2) R2) (delete (ReshapeRunRest L x d c l v s e)))
      :ruleset analysis :name "reshaperun/jump")
"""
