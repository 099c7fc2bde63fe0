"""Pictures of a graph for ``optimus-eq explain`` (:mod:`optimus_eq.explain`): SVG of an FX graph before
optimization (ops coloured by what became of them, framed in the colour of the pattern credited with them) and
after (ops coloured by kind).

SVG from graphviz's ``dot`` when the ``graphviz`` Python package and the ``dot`` program are installed
(:func:`dot_svg`), else a simple layered drawing of our own (:func:`layered_svg`); graphs over
:data:`MAX_PICTURE_NODES` nodes are not drawn.
"""

from __future__ import annotations

import html
import shutil
from collections import defaultdict

from torch.fx import GraphModule, Node

from optimus_bridge.vocab import op_kind

#: graphs with more nodes than this are not drawn (the picture would be unreadable and dot slow)
MAX_PICTURE_NODES = 400
#: before-picture fill colours by what became of an op
_FATE_COLOUR = {"removed": "#f4a6a6", "rewritten": "#f9d38c", "kept": "#ffffff", "opaque": "#d0d0d0"}
_KIND_COLOUR = [  # after-picture colours by op kind
    (("split", "chunk", "unbind", "cat", "stack", "getitem"), "#f4a6a6"),
    (("bmm", "bmm_add", "baddbmm", "addcmul", "embedding_bag", "embedding"), "#a8e6a3"),
    (("reshape", "view", "permute", "unsqueeze", "narrow", "select", "slice", "movedim", "unflatten",
      "expand", "transpose", "flatten", "squeeze"), "#cfe3f7"),
]


def _label(n: Node) -> str:
    if n.op in ("placeholder", "output"):
        return n.name if len(n.name) <= 28 else n.name[:12] + "..." + n.name[-12:]
    kind = op_kind(n)
    return n.name if n.name.rstrip("_0123456789") == kind else f"{n.name}\n{kind}"


#: border colours of the patterns credited with the ops of a before picture, in order of the patterns' names
PATTERN_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#d62728", "#17becf", "#bcbd22", "#e377c2", "#8c564b",
                   "#ff7f0e", "#7f7f7f")


def pattern_borders(credits: dict[str, list[str]]) -> tuple[dict[str, str], dict[str, str]]:
    """``(op name -> border colour, pattern -> colour)``: each credited op framed in its pattern's colour (the
    first pattern by name where several are credited)."""
    legend = {p: PATTERN_COLOURS[i % len(PATTERN_COLOURS)] for i, p in enumerate(sorted(credits))}
    borders: dict[str, str] = {}
    for p in sorted(credits):
        for n in credits[p]:
            borders.setdefault(n, legend[p])
    return borders, legend


def _after_colour(n: Node) -> str:
    kind = op_kind(n)
    for kinds, colour in _KIND_COLOUR:
        if kind in kinds:
            return colour
    return "#ffffff"


def picture_colours(gm: GraphModule, fates: dict[str, str] | None, kept: dict[str, str] | None) -> dict[str, str]:
    """Node name -> fill colour: by fate in the before picture (``fates`` given), by op kind after."""
    out = {}
    for n in gm.graph.nodes:
        if fates is not None:
            fate = "opaque" if kept and n.name in kept else fates.get(n.name)
            out[n.name] = _FATE_COLOUR.get(fate, "#eeeeee" if n.op in ("placeholder", "output") else "#ffffff")
        else:
            out[n.name] = "#eeeeee" if n.op in ("placeholder", "output") else _after_colour(n)
    return out


def dot_available() -> bool:
    """Whether the ``graphviz`` Python package and graphviz's ``dot`` program are both installed."""
    try:
        import graphviz  # noqa: F401
    except ImportError:
        return False
    return shutil.which("dot") is not None


def dot_svg(gm: GraphModule, colours: dict[str, str], borders: dict[str, str] | None = None) -> str:
    """The graph drawn by graphviz's ``dot`` as SVG text (needs :func:`dot_available`)."""
    import graphviz

    g = graphviz.Digraph(graph_attr={"rankdir": "TB", "fontsize": "10"},
                         node_attr={"shape": "box", "style": "filled,rounded", "fontname": "Helvetica",
                                    "fontsize": "9"})
    for n in gm.graph.nodes:
        frame = {"color": borders[n.name], "penwidth": "3"} if borders and n.name in borders else {}
        g.node(n.name, _label(n), fillcolor=colours.get(n.name, "#ffffff"), **frame)
        for a in n.all_input_nodes:
            g.edge(a.name, n.name)
    svg = g.pipe(format="svg").decode()
    return svg[svg.index("<svg"):]


def layered_svg(gm: GraphModule, colours: dict[str, str], borders: dict[str, str] | None = None) -> str:
    """A simple drawing without graphviz: a node's row is its longest path from an input, nodes in a row in
    graph order, straight edges. Readable for the small graphs ``explain`` is for."""
    nodes = list(gm.graph.nodes)
    depth: dict[Node, int] = {}
    for n in nodes:
        depth[n] = 1 + max((depth[a] for a in n.all_input_nodes), default=-1)
    rows: dict[int, list[Node]] = defaultdict(list)
    for n in nodes:
        rows[depth[n]].append(n)
    w, h, gap_x, gap_y = 150, 34, 14, 36
    pos = {}
    width = max(len(r) for r in rows.values()) * (w + gap_x) + gap_x
    for d, row in rows.items():
        offset = (width - len(row) * (w + gap_x)) / 2
        for i, n in enumerate(row):
            pos[n] = (offset + gap_x / 2 + i * (w + gap_x), 10 + d * (h + gap_y))
    height = 20 + (max(rows) + 1) * (h + gap_y)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}" '
             f'font-family="Helvetica" font-size="9">']
    for n in nodes:
        x2, y2 = pos[n]
        for a in n.all_input_nodes:
            x1, y1 = pos[a]
            parts.append(f'<line x1="{x1 + w / 2:.0f}" y1="{y1 + h:.0f}" x2="{x2 + w / 2:.0f}" y2="{y2:.0f}" '
                         'stroke="#888" stroke-width="0.8"/>')
    for n in nodes:
        x, y = pos[n]
        stroke = (f'stroke="{borders[n.name]}" stroke-width="3"' if borders and n.name in borders
                  else 'stroke="#555"')
        parts.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="{w}" height="{h}" rx="4" '
                     f'fill="{colours.get(n.name, "#fff")}" {stroke}/>')
        for k, text in enumerate(_label(n).split("\n")):
            parts.append(f'<text x="{x + w / 2:.0f}" y="{y + 13 + 11 * k:.0f}" text-anchor="middle">'
                         f'{html.escape(text[:30])}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def draw(gm: GraphModule, colours: dict[str, str], use_dot: bool, borders: dict[str, str] | None = None) -> str | None:
    """SVG text of ``gm`` (dot or the built-in layout), or None for graphs over :data:`MAX_PICTURE_NODES`."""
    if len(gm.graph.nodes) > MAX_PICTURE_NODES:
        return None
    return dot_svg(gm, colours, borders) if use_dot else layered_svg(gm, colours, borders)
