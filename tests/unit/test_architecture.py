"""The import structure, as grimp sees it: no circle between modules of `segos_pipeline` or of `assets`.

Imports inside functions and under `TYPE_CHECKING` count: a lazy import still makes one module need the
other. Which layer may import which is checked by the import-linter contracts in pyproject.toml
(`lint-imports`, run by .ci/run); this test keeps the modules within a layer acyclic too.
"""

from __future__ import annotations

import grimp
import pytest


def _circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & set(modules)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return circles


@pytest.mark.parametrize("package", ["segos_pipeline", "assets"])
def test_no_import_circle_between_modules(package: str):
    graph = grimp.build_graph(package, cache_dir=None)
    assert len(graph.modules) > 5
    assert _circles(graph) == []


def test_the_circle_finder_finds_circles():
    graph = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c", "p.d"):
        graph.add_module(m)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    graph.add_import(importer="p.c", imported="p.a")
    graph.add_import(importer="p.c", imported="p.d")
    assert _circles(graph) == [["p.a", "p.b", "p.c"]]
