#!/usr/bin/env python
"""The import structure of the package, as numbers and a picture (the figure of docs/architecture.md).

Reads the source with ``ast`` (nothing is imported or run), takes every module-level and function-level import
between the project's own modules, and reports, for the tree at ``--root`` (default: this checkout):

* modules and imports between them;
* imports that cross from one sub-package to another (``maskrcnn_benchmark.engine`` -> ``...modeling``);
* imports that go up the layering (a sub-package importing one that imports it, directly or not);
* edge crossings of the package graph drawn in layers (each package one floor above everything it imports,
  packages ordered on each floor to minimize crossings, exhaustively where the floor is small): what the eye
  follows in the picture.

    python bench/import_graph.py [--root DIR] [--png docs/architecture_imports.png]

Last line: ``imports: <M> modules, <E> imports, <X> cross-package, <U> upward, <C> crossings``.
"""
import argparse
import ast
import itertools
import os
import random
import sys

PACKAGES = ("maskrcnn_benchmark", "mlperf_review")


def _modules(root):
    out = {}
    for top in PACKAGES:
        base = os.path.join(root, top)
        if not os.path.isdir(base):
            continue
        for folder, _, files in os.walk(base):
            for f in files:
                if not f.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(folder, f), root)[:-3].replace(os.sep, ".")
                name = rel[: -len(".__init__")] if rel.endswith(".__init__") else rel
                out[name] = os.path.join(folder, f)
    return out


def _resolve(module, is_package, node):
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join(base + ([node.module] if node.module else []))


def import_edges(root):
    modules = _modules(root)
    edges = set()
    for name, path in modules.items():
        is_package = path.endswith("__init__.py")
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges.add((name, t))
    # an import of a package's __init__ that only re-exports counts as an import of the package itself
    return sorted(modules), sorted(edges)


def package_of(module):
    parts = module.split(".")
    if parts[0] == "maskrcnn_benchmark" and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def package_graph(edges):
    pedges = {(package_of(a), package_of(b)) for a, b in edges if package_of(a) != package_of(b)}
    nodes = sorted({p for e in pedges for p in e})
    return nodes, sorted(pedges)


def _floors(nodes, pedges):
    below = {n: {b for a, b in pedges if a == n} for n in nodes}
    floor = {}

    def level(n, seen=()):
        if n in floor:
            return floor[n]
        if n in seen:
            return 0  # a cycle: flatten
        floor[n] = 1 + max((level(b, seen + (n,)) for b in below[n]), default=0)
        return floor[n]

    for n in nodes:
        level(n)
    return floor


def upward_edges(nodes, pedges):
    """Package edges that close a cycle (a package importing one that imports it, directly or through others)."""
    reach = {n: set() for n in nodes}
    for a, b in pedges:
        reach[a].add(b)
    changed = True
    while changed:
        changed = False
        for n in nodes:
            more = set().union(*(reach[m] for m in reach[n])) - reach[n]
            if more:
                reach[n] |= more
                changed = True
    return [(a, b) for a, b in pedges if a in reach[b]]


def layered_crossings(nodes, pedges):
    """Minimum number of crossings found for the layered drawing (long edges through dummy nodes), by the
    usual heuristics: barycentre ordering sweeps and adjacent swaps, keeping the best drawing found."""
    floor = _floors(nodes, pedges)
    layers = {}
    for n in nodes:
        layers.setdefault(floor[n], []).append(n)
    segments = []  # (upper layer index, upper node, lower node) between adjacent layers
    dummy = 0
    for a, b in pedges:
        fa, fb = floor[a], floor[b]
        if fa <= fb:
            continue
        prev = a
        for f in range(fa - 1, fb, -1):
            d = f"~{dummy}"
            dummy += 1
            layers.setdefault(f, []).append(d)
            segments.append((f + 1, prev, d))
            prev = d
        segments.append((fb + 1, prev, b))
    order = {f: list(ns) for f, ns in layers.items()}

    def crossings_between(f):
        pos_u = {n: i for i, n in enumerate(order[f])}
        pos_l = {n: i for i, n in enumerate(order[f - 1])}
        segs = [(pos_u[u], pos_l[l]) for ff, u, l in segments if ff == f]
        return sum(1 for (a1, b1), (a2, b2) in itertools.combinations(segs, 2) if (a1 - a2) * (b1 - b2) < 0)

    def total():
        return sum(crossings_between(f) for f in order if f - 1 in order)

    def barycentre(f, other, upper):
        pos = {n: i for i, n in enumerate(order[other])}
        ends = {}
        for ff, u, lo in segments:
            if upper and ff == f + 1:      # f is the lower floor of this segment: neighbours above
                ends.setdefault(lo, []).append(pos.get(u))
            if not upper and ff == f:      # f is the upper floor: neighbours below
                ends.setdefault(u, []).append(pos.get(lo))
        current = {n: i for i, n in enumerate(order[f])}

        def key(n):
            vals = [v for v in ends.get(n, []) if v is not None]
            return sum(vals) / len(vals) if vals else current[n]

        order[f] = sorted(order[f], key=key)

    floors = sorted(order)
    best, best_order = total(), {f: list(ns) for f, ns in order.items()}
    rng = random.Random(0)
    for start in range(12):  # a few starting orders: the heuristics find a local minimum from each
        if start:
            for f in floors:
                rng.shuffle(order[f])
        for sweep in range(12):  # Sugiyama: barycentre sweeps down and up, then adjacent swaps
            for f in (floors[::-1] if sweep % 2 == 0 else floors):
                if sweep % 2 == 0 and f + 1 in order:
                    barycentre(f, f + 1, upper=True)
                elif sweep % 2 == 1 and f - 1 in order:
                    barycentre(f, f - 1, upper=False)
            improved = True
            while improved:
                improved = False
                for f in floors:
                    for i in range(len(order[f]) - 1):
                        before = total()
                        order[f][i], order[f][i + 1] = order[f][i + 1], order[f][i]
                        if total() < before:
                            improved = True
                        else:
                            order[f][i], order[f][i + 1] = order[f][i + 1], order[f][i]
            t = total()
            if t < best:
                best, best_order = t, {f: list(ns) for f, ns in order.items()}
    return best, best_order, floor, segments


def draw(nodes, segments, order, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from maskrcnn_benchmark.utils.fileio import atomic_write

    xy = {}
    top = max(order)
    width = max(len(ns) for ns in order.values())
    for f, ns in order.items():
        for i, n in enumerate(ns):
            xy[n] = ((i + 0.5) * width / len(ns), f)
    fig, ax = plt.subplots(figsize=(1.6 * width + 2, 1.3 * top + 1))
    for _, u, lo in segments:
        (x0, y0), (x1, y1) = xy[u], xy[lo]
        ax.plot([x0, x1], [y0, y1], color="0.6", lw=0.9, zorder=1)
        if not lo.startswith("~"):
            ax.annotate("", xy=(x1, y1 + 0.12), xytext=(x1 + (x0 - x1) * 0.1, y1 + 0.12 + (y0 - y1) * 0.1),
                        arrowprops={"arrowstyle": "->", "color": "0.45", "lw": 0.9})
    for n in nodes:
        x, y = xy[n]
        ax.text(x, y, n.replace("maskrcnn_benchmark.", ""), ha="center", va="center", fontsize=10, zorder=2,
                bbox={"boxstyle": "round", "facecolor": "#dde8f4", "edgecolor": "#4a6a90"})
    ax.set_xlim(-0.3, width + 0.3)
    ax.set_ylim(0.5, top + 0.5)
    ax.set_axis_off()
    ax.set_title(title)
    with atomic_write(path, "wb", what="import picture") as f:
        fig.savefig(f, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)


def measure(root):
    modules, edges = import_edges(root)
    nodes, pedges = package_graph(edges)
    cross = [e for e in edges if package_of(e[0]) != package_of(e[1])]
    up = upward_edges(nodes, pedges)
    crossings, order, floor, segments = layered_crossings(nodes, pedges)
    return {"modules": len(modules), "imports": len(edges), "cross_package": len(cross), "upward": len(up),
            "crossings": crossings, "packages": len(nodes), "package_edges": len(pedges), "nodes": nodes,
            "pedges": pedges, "order": order, "floor": floor, "segments": segments, "upward_list": up}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p.add_argument("--png", default="", help="draw the package graph here")
    args = p.parse_args(argv)
    m = measure(args.root)
    print("| measure | value |\n|---|---:|")
    for k in ("modules", "imports", "cross_package", "upward", "packages", "package_edges", "crossings"):
        print(f"| {k.replace('_', ' ')} | {m[k]} |")
    for a, b in m["upward_list"]:
        print(f"upward: {a} -> {b}")
    if args.png:
        draw(m["nodes"], m["segments"], m["order"], args.png,
             f"package imports of {os.path.basename(os.path.abspath(args.root))}: {m['crossings']} crossings")
    print(f"imports: {m['modules']} modules, {m['imports']} imports, {m['cross_package']} cross-package, "
          f"{m['upward']} upward, {m['crossings']} crossings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
