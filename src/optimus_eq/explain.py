"""``optimus-eq explain``: what each strategy did to a user's model, by source line, as text and one HTML page.

For each strategy and each captured graph (:mod:`optimus_eq.modelrun`):

* **Which pattern rewrote which source lines.** The report's ``node_fates`` say which input ops a plan computes
  as written, rewrote or removed; a pattern is credited with an op when leaving that one pattern out of the set
  (everything else the same) keeps the op as written: a leave-one-out run of :func:`optimus_eq.optimize` per
  pattern that fired. Ops several patterns could each remove alone are credited to none of them and listed as
  "more than one pattern". Source lines come from the FX nodes' ``stack_trace`` meta (Dynamo records it; the
  post-grad graphs of AOTAutograd keep it).
* **What was left alone and why**: the report's ``kept_reasons`` (unsupported op, mutation or global state,
  symbolic size, ...).
* **Horizontal candidates not batched**: ops of a kind a horizontal pattern batches (linear, layer_norm, tanh,
  ...) that the plan keeps as written, grouped by op, dtype and input shapes (the part of Optimus' group key
  FX meta gives cheaply); a group smaller than ``min_fuse_set_size`` is named as the reason, otherwise the
  reason is not known here (dependencies between members, the cost model, other key parts: weights' shapes,
  devices).
* **Pictures** of each graph before (ops coloured by what became of them, framed in the colour of the pattern
  credited with them) and after (ops coloured by kind):
  SVG from graphviz's ``dot`` when the ``graphviz`` Python package and the ``dot`` program are installed, else
  a simple layered drawing of our own (:mod:`optimus_eq.pictures`); graphs over
  :data:`~optimus_eq.pictures.MAX_PICTURE_NODES` nodes are not drawn.

* **Patterns that matched but are credited with nothing** (for eqsat: alternatives extraction did not choose),
  with what each does alone to the input graph under the cost model (:func:`alone_cost`: how much it loses, or
  that it saves and another pattern makes the same rewrite). Alternatives inside the e-graph are not listed
  one by one (the e-graph is closed when ``optimize`` returns).
"""

from __future__ import annotations

import html
import re
from collections import defaultdict
from dataclasses import dataclass, field

from torch.fx import GraphModule, Node

import optimus_eq
from optimus_bridge.vocab import op_kind
from optimus_eq.modelrun import GraphRun, ModelSpec, StrategyRun, eager_result, run_strategy
from optimus_eq.patterns import DEFAULT_REGISTRY
from optimus_eq.pictures import MAX_PICTURE_NODES, dot_available, draw, pattern_borders, picture_colours

#: horizontal pattern -> op kinds it batches (pre-grad; the report's op kinds): ``HorizontalPattern.batches``
BATCHED_KINDS = {p.name: p.batches for p in DEFAULT_REGISTRY if getattr(p, "batches", ())}


@dataclass(frozen=True)
class SourceLine:
    """Where an FX node came from: the innermost frame of its ``stack_trace`` (file, line, code)."""

    file: str
    line: int
    code: str

    def __str__(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}  {self.code}"


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*\n\s*([^\n]*)')


def source_of(node: Node) -> SourceLine | None:
    """The innermost frame of ``node.meta["stack_trace"]``, or None when the node has none."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if not frames:
        return None
    file, line, code = frames[-1]
    return SourceLine(file, int(line), code.strip())


@dataclass
class GraphExplanation:
    """One graph under one strategy: credits, ops left alone, horizontal misses, pictures.

    Attributes:
        credits: pattern -> names of the input ops it is credited with (leave-one-out).
        uncredited: input ops rewritten or removed that no single pattern's absence keeps.
        unused: pattern -> what applying it alone would do, for the patterns that matched (``rule_matches``)
            but are credited with no op (for eqsat: alternatives extraction did not choose, or rewrites another
            pattern also makes): :func:`alone_cost`'s text; empty without credits.
        left_alone: op name -> why it was kept verbatim.
        horizontal_misses: ``(op kind, member names, reason)`` per group of batchable ops kept as written.
        sources: op name -> its :class:`SourceLine` (where known).
        pictures: ``"before"`` / ``"after"`` -> SVG text (absent when not drawn).
        pattern_colours: pattern -> the border colour of its credited ops in the before picture.
    """

    run: GraphRun
    credits: dict[str, list[str]] = field(default_factory=dict)
    uncredited: list[str] = field(default_factory=list)
    left_alone: dict[str, str] = field(default_factory=dict)
    horizontal_misses: list[tuple[str, list[str], str]] = field(default_factory=list)
    sources: dict[str, SourceLine] = field(default_factory=dict)
    pictures: dict[str, str] = field(default_factory=dict)
    pattern_colours: dict[str, str] = field(default_factory=dict)
    unused: dict[str, str] = field(default_factory=dict)


@dataclass
class Explanation:
    """Everything ``optimus-eq explain`` shows: the runs, one :class:`GraphExplanation` per graph and strategy,
    and how pictures were drawn (``picture_method``: ``"graphviz dot"``, ``"built-in layered SVG"``)."""

    spec: ModelSpec
    level: str
    runs: list[StrategyRun]
    graphs: dict[str, list[GraphExplanation]]
    picture_method: str
    min_fuse_set_size: int


def _patterns(level: str, options: dict) -> list[str]:
    """The patterns ``optimize`` runs by default at ``level`` (those of ``options["registry"]`` if given)."""
    return [p.name for p in options.get("registry", DEFAULT_REGISTRY) if level in p.levels]


def attribute(g: GraphRun, strategy: str, level: str, options: dict) -> tuple[dict[str, list[str]], list[str]]:
    """Leave-one-out credits (module docstring): ``(pattern -> op names, uncredited op names)``."""
    fates = g.report.node_fates
    changed = [n for n, f in fates.items() if f != "kept"]
    chosen = _patterns(level, options)
    canonical = {p.name for p in options.get("registry", DEFAULT_REGISTRY) if p.kind == "canonical"}
    credits: dict[str, list[str]] = {}
    for pattern in sorted(p for p, n in g.report.rule_matches.items() if n and p not in canonical and p in chosen):
        rest = [p for p in chosen if p != pattern]
        opts = dict(options)
        if "pattern_options" in opts:
            opts["pattern_options"] = {k: v for k, v in opts["pattern_options"].items() if k in rest}
        _, report = optimus_eq.optimize(g.before, list(g.example_inputs), strategy=strategy, level=level,
                                        patterns=rest, **opts)
        if report.fallback:
            continue
        got = [n for n in changed if report.node_fates.get(n) == "kept"]
        if got:
            credits[pattern] = got
    credited = {n for names in credits.values() for n in names}
    return credits, [n for n in changed if n not in credited]


def alone_cost(g: GraphRun, pattern: str, level: str, options: dict) -> str:
    """What ``pattern`` alone does to the input graph under the cost model: greedy (which applies every match)
    with the canonical patterns and ``pattern``, against greedy with the canonical patterns only. A pattern
    eqsat offered and did not choose shows here how much it loses; one that saves alone was left out because
    another pattern makes the same rewrite."""
    registry = options.get("registry", DEFAULT_REGISTRY)
    canonical = [p.name for p in registry if p.kind == "canonical" and level in p.levels]
    opts = {k: v for k, v in options.items() if k != "pattern_options"}
    costs = []
    for chosen in (canonical, canonical + [pattern]):
        mine = {k: v for k, v in options.get("pattern_options", {}).items() if k in chosen}
        _, r = optimus_eq.optimize(g.before, list(g.example_inputs), strategy="greedy", level=level,
                                   patterns=chosen, **opts, **({"pattern_options": mine} if mine else {}))
        if r.fallback or r.cost_after is None:
            return "not measured (the optimizer fell back)"
        costs.append(r.cost_after)
    delta = costs[1] - costs[0]
    if abs(delta) <= 1e-6 * max(1.0, costs[0]):
        return f"applied alone it leaves the cost at {costs[0]:.1f} us (it rewrites what other patterns leave)"
    if delta > 0:
        return f"applied alone it costs {delta:.1f} us more ({costs[0]:.1f} -> {costs[1]:.1f} us, cost model)"
    return (f"applied alone it saves {-delta:.1f} us ({costs[0]:.1f} -> {costs[1]:.1f} us): another pattern makes "
            "the same rewrite")


def horizontal_misses(g: GraphRun, level: str, min_fuse_set_size: int) -> list[tuple[str, list[str], str]]:
    """Groups of batchable ops the plan keeps as written (module docstring), pre-grad only."""
    if level != "pre_grad":
        return []
    kinds = {k for ks in BATCHED_KINDS.values() for k in ks}
    kinds |= {p.name.removeprefix("batch_") for p in DEFAULT_REGISTRY
              if p.kind == "horizontal" and p.name.startswith("batch_") and p.name not in BATCHED_KINDS}
    fates = g.report.node_fates
    groups: dict[tuple, list[str]] = defaultdict(list)
    for n in g.before.graph.nodes:
        kind = op_kind(n)
        if kind not in kinds or fates.get(n.name) != "kept":
            continue
        shapes = tuple(tuple(a.meta["example_value"].shape) if "example_value" in a.meta and
                       hasattr(a.meta["example_value"], "shape") else None for a in n.all_input_nodes)
        val = n.meta.get("example_value")
        groups[(kind, str(getattr(val, "dtype", None)), shapes)].append(n.name)
    out = []
    ancestors = _ancestors(g.before) if len(g.before.graph.nodes) <= MAX_DEPENDENCY_NODES else None
    for (kind, dtype, shapes), names in groups.items():
        free = independent_subset(names, ancestors) if ancestors is not None else names
        if len(names) < min_fuse_set_size:
            why = (f"{len(names)} op(s) of this op, dtype and input shapes: below min_fuse_set_size = "
                   f"{min_fuse_set_size}")
        elif len(free) < min_fuse_set_size:
            why = (f"dependencies: the others depend on the first {len(free)} independent one(s) "
                   f"({', '.join(free)}; Optimus' greedy independent subset, in graph order), below "
                   f"min_fuse_set_size = {min_fuse_set_size}")
        else:
            why = ("not batched for a reason not read here: the cost model, or key parts FX meta does not give "
                   "(weights' shapes, devices, gradient signatures)")
        out.append((kind, names, why))
    return out


#: graphs larger than this get no dependency reasons (one ancestor bitset per node)
MAX_DEPENDENCY_NODES = 20_000


def _ancestors(gm: GraphModule) -> dict[str, int]:
    """Node name -> bitset (int) of its ancestors, by index in graph order."""
    index, anc = {}, {}
    for i, n in enumerate(gm.graph.nodes):
        index[n.name] = i
        bits = 0
        for a in n.all_input_nodes:
            bits |= anc[a.name] | (1 << index[a.name])
        anc[n.name] = bits
    anc["__index__"] = index  # type: ignore[assignment]
    return anc


def independent_subset(names: list[str], ancestors: dict) -> list[str]:
    """The members, in graph order, that no earlier chosen member reaches or is reached by (Optimus' greedy
    independent subset): a path between two ops means one needs the other's value, so they cannot run as one
    batched op."""
    index = ancestors["__index__"]
    chosen: list[str] = []
    for n in sorted(names, key=index.__getitem__):
        if all(not (ancestors[n] >> index[c]) & 1 and not (ancestors[c] >> index[n]) & 1 for c in chosen):
            chosen.append(n)
    return chosen


# -- the whole explanation ------------------------------------------------------------------------------------

def explain(spec: ModelSpec, strategies: list[str], level: str = "pre_grad", options: dict | None = None, *,
            credits: bool = True, pictures: bool = True, min_fuse_set_size: int = 5,
            rtol: float = 1e-4, atol: float = 1e-4) -> Explanation:
    """Run each strategy on ``spec`` (:func:`optimus_eq.modelrun.run_strategy`) and explain every graph.

    Args:
        options: :func:`optimus_eq.optimize` options (as ``optimus-eq optimize`` builds them).
        credits: run the leave-one-out credits (one more ``optimize`` per pattern that fired, per graph).
        pictures: draw the graphs.
        min_fuse_set_size: the value the horizontal patterns ran with (for the horizontal misses' reason).
    """
    options = dict(options or {})
    expected = eager_result(spec)
    use_dot = pictures and dot_available()
    method = ("graphviz dot" if use_dot else "built-in layered SVG (graphviz's dot not installed)") if pictures \
        else "none (--no-pictures)"
    runs, graphs = [], {}
    for s in strategies:
        run = run_strategy(spec, s, level, rtol=rtol, atol=atol, options=options, expected=expected)
        runs.append(run)
        graphs[s] = []
        for g in run.graphs:
            e = GraphExplanation(g, left_alone=dict(g.report.kept_reasons))
            e.sources = {n.name: src for n in g.before.graph.nodes if (src := source_of(n))}
            if credits and s != "none" and not g.report.fallback:
                e.credits, e.uncredited = attribute(g, s, level, options)
                canonical = {p.name for p in DEFAULT_REGISTRY if p.kind == "canonical"}
                unused = sorted(p for p, n in g.report.rule_matches.items()
                                if n and p not in e.credits and p not in canonical)
                e.unused = {p: alone_cost(g, p, level, options) for p in unused}
            else:
                e.uncredited = [n for n, f in g.report.node_fates.items() if f != "kept"]
            e.horizontal_misses = horizontal_misses(g, level, min_fuse_set_size)
            if pictures:
                e.pictures = draw_pictures(e, use_dot)
            graphs[s].append(e)
    return Explanation(spec, level, runs, graphs, method, min_fuse_set_size)


def draw_pictures(e: GraphExplanation, use_dot: bool) -> dict[str, str]:
    """``"before"`` / ``"after"`` -> SVG text of ``e``'s graph (by graphviz's dot when ``use_dot``, else the
    built-in layout); the before picture's ops framed in the colour of the pattern credited with them (sets
    ``e.pattern_colours``). A graph over :data:`MAX_PICTURE_NODES` nodes is left out."""
    g = e.run
    borders, e.pattern_colours = pattern_borders(e.credits)
    out = {}
    for which, gm, colours, frame in (
            ("before", g.before, picture_colours(g.before, g.report.node_fates, g.report.kept_reasons), borders),
            ("after", g.after, picture_colours(g.after, None, None), None)):
        svg = draw(gm, colours, use_dot, frame)
        if svg:
            out[which] = svg
    return out


def _by_line(names: list[str], sources: dict[str, SourceLine]) -> list[tuple[str, list[str]]]:
    """``(source line, op names)`` in line order; ops without a source last."""
    lines: dict[SourceLine | None, list[str]] = defaultdict(list)
    for n in names:
        lines[sources.get(n)].append(n)
    known = sorted((k for k in lines if k is not None), key=lambda k: (k.file, k.line))
    return [(str(k), lines[k]) for k in known] + ([("(no source line)", lines[None])] if None in lines else [])


_UNUSED = "alternatives extraction did not choose, or rewrites another pattern also makes"


def to_text(ex: Explanation) -> str:
    """The explanation as plain text (what the command prints)."""
    out = []
    for s, graphs in ex.graphs.items():
        for e in graphs:
            r = e.run.report
            out.append(f"== {s}, {e.run.name} ({ex.level}): FX nodes {r.nodes_before} -> {r.nodes_after}, "
                       f"junk {r.junk_counts()[0]} -> {r.junk_counts()[1]}"
                       + (f", FELL BACK: {r.fallback}" if r.fallback else ""))
            # the plan extraction chose, dropped for the input graph (plan_check.dearer_than_input): every op kept
            out.extend(f"  {note}" for note in r.notes if "kept the input graph" in note)
            for pattern, names in sorted(e.credits.items()):
                out.append(f"  {pattern} rewrote {len(names)} op(s):")
                out.extend(f"    {line}    [{', '.join(ns)}]" for line, ns in _by_line(names, e.sources))
            if e.uncredited:
                out.append(f"  more than one pattern (or not credited) rewrote {len(e.uncredited)} op(s):")
                out.extend(f"    {line}    [{', '.join(ns)}]" for line, ns in _by_line(e.uncredited, e.sources))
            if e.unused:
                out.append(f"  matched but credited with no op ({_UNUSED}):")
                out.extend(f"    {p}: {what}" for p, what in e.unused.items())
            if e.left_alone:
                out.append(f"  left alone ({len(e.left_alone)} op(s)):")
                out.extend(f"    {n}: {why}" + (f"    at {e.sources[n]}" if n in e.sources else "")
                           for n, why in e.left_alone.items())
            for kind, names, why in e.horizontal_misses:
                out.append(f"  not batched: {len(names)} x {kind} [{', '.join(names)}]: {why}")
    return "\n".join(out)


_CSS = """
body { font-family: Helvetica, Arial, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; } h3 { font-size: 1.05em; }
table { border-collapse: collapse; margin: 0.5em 0; } td, th { border: 1px solid #ccc; padding: 3px 8px;
  vertical-align: top; font-size: 0.9em; text-align: left; }
code, pre { font-family: Menlo, Consolas, monospace; font-size: 0.85em; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; }
.pictures figure { margin: 0 0 1em 0; overflow-x: auto; border: 1px solid #ddd; padding: 4px; }
.pictures svg { max-width: 100%; height: auto; display: block; }
.pictures input.zoom:checked ~ svg { max-width: none; }
.pictures label { font-size: 0.85em; color: #555; margin-left: 1em; }
.legend { line-height: 2.2; } .legend span { padding: 1px 6px; border: 1px solid #999; margin-right: 6px; }
"""


def _figure(ident: str, caption: str, svg: str) -> str:
    """One picture, scaled down to the page's width; its "actual size" box (CSS only, no script) shows it at
    full size in a scrolling frame."""
    ident = html.escape(ident)
    return (f"<figure><input type='checkbox' class='zoom' id='{ident}'><label for='{ident}'>actual size</label>"
            f"<figcaption>{html.escape(caption)}</figcaption>{svg}</figure>")


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def to_html(ex: Explanation, summary_table: str = "") -> str:
    """One self-contained HTML page (inline CSS and SVG, no scripts, nothing fetched)."""
    esc = html.escape
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>optimus-eq explain: {esc(ex.spec.name)}"
             f"</title><style>{_CSS}</style></head><body>",
             f"<h1>optimus-eq explain: <code>{esc(ex.spec.name)}</code></h1>",
             f"<p>Level <b>{esc(ex.level)}</b>; strategies {esc(', '.join(ex.graphs))}; "
             f"{'a training step (loss given)' if ex.spec.loss else 'inference (torch.no_grad)'}; "
             f"min_fuse_set_size {ex.min_fuse_set_size}; pictures: {esc(ex.picture_method)}.</p>"]
    if summary_table:
        parts.append(f"<pre>{esc(summary_table)}</pre>")
    parts.append("<p>A pattern is credited with an op when leaving that pattern out keeps the op as written "
                 "(one more optimize run per pattern). Source lines are the innermost frame of each FX node's "
                 "<code>stack_trace</code>.</p>")
    legend = ("<p class='legend'>before: <span style='background:#f4a6a6'>removed</span>"
              "<span style='background:#f9d38c'>rewritten</span><span style='background:#fff'>kept as written"
              "</span><span style='background:#d0d0d0'>left alone (opaque)</span> &nbsp; after: "
              "<span style='background:#f4a6a6'>split/cat/stack</span><span style='background:#a8e6a3'>batched "
              "op</span><span style='background:#cfe3f7'>view</span></p>")
    for run in ex.runs:
        parts.append(f"<h2>strategy {esc(run.strategy)}</h2>")
        if run.error:
            parts.append(f"<p><b>error:</b> {esc(run.error)}</p>")
        parts.append(f"<p>outputs equal eager: <b>{'yes' if run.outputs_match else 'NO'}</b>"
                     + (f" (max |diff| {run.max_abs_diff:.1e})" if run.max_abs_diff is not None else "")
                     + (f"<br>{esc(run.mismatch)}" if run.mismatch else "") + "</p>")
        for gi, e in enumerate(ex.graphs[run.strategy]):
            r = e.run.report
            parts.append(f"<h3>{esc(e.run.name)}</h3><pre>{esc(r.summary())}</pre>")
            rows = [[f"<b>{esc(p)}</b>", "<br>".join(f"<code>{esc(line)}</code> [{esc(', '.join(ns))}]"
                                                       for line, ns in _by_line(names, e.sources))]
                    for p, names in sorted(e.credits.items())]
            if e.uncredited:
                rows.append(["<i>more than one pattern / not credited</i>",
                             "<br>".join(f"<code>{esc(line)}</code> [{esc(', '.join(ns))}]"
                                         for line, ns in _by_line(e.uncredited, e.sources))])
            if rows:
                parts.append("<p>Which pattern rewrote which source lines:</p>" + _table(["pattern", "source lines [ops]"], rows))
            if e.unused:
                parts.append(f"<p>Matched but credited with no op ({esc(_UNUSED)}):</p>"
                             + _table(["pattern", "alone"], [[f"<code>{esc(p)}</code>", esc(what)]
                                                             for p, what in e.unused.items()]))
            if e.left_alone:
                parts.append("<p>Left alone:</p>" + _table(["op", "why", "source"], [
                    [f"<code>{esc(n)}</code>", esc(why), f"<code>{esc(str(e.sources.get(n, '')))}</code>"]
                    for n, why in e.left_alone.items()]))
            if e.horizontal_misses:
                parts.append("<p>Horizontal candidates not batched:</p>" + _table(["op", "members", "why"], [
                    [esc(k), esc(", ".join(ns)), esc(why)] for k, ns, why in e.horizontal_misses]))
            if e.pictures:
                frames = "".join(f"<span style='border:3px solid {c}'>{esc(p)}</span>"
                                 for p, c in e.pattern_colours.items())
                parts.append(legend + (f"<p class='legend'>framed by the pattern credited: {frames}</p>" if frames
                                       else "") + "<div class='pictures'>" + "".join(
                    _figure(f"pic-{run.strategy}-{gi}-{which}", which, svg) for which, svg in e.pictures.items())
                    + "</div>")
            elif len(e.run.before.graph.nodes) > MAX_PICTURE_NODES:
                parts.append(f"<p>(graph over {MAX_PICTURE_NODES} nodes: not drawn)</p>")
            parts.append(f"<details><summary>optimized graph code</summary><pre>{esc(e.run.after.code)}</pre></details>")
    parts.append("</body></html>")
    return "\n".join(parts)
