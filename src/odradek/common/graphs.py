"""Graph algorithms the project needs in more than one place."""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Set
from typing import Any, Protocol, TypeVar


class _Ordered(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


T = TypeVar("T", bound=_Ordered)


def strongly_connected(graph: Mapping[T, Set[T]]) -> list[set[T]]:
    """Tarjan's strongly connected components of ``graph`` (node -> the nodes it has an edge
    to), iteratively: a chain of thousands of nodes (a producer's transactions, in the
    transactional fault checker) would pass Python's recursion limit. Nodes are visited in
    sorted order, so the result does not depend on the mapping's order."""
    index: dict[T, int] = {}
    low: dict[T, int] = {}
    stack: list[T] = []
    on_stack: set[T] = set()
    out: list[set[T]] = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work: list[tuple[T, Iterator[T]]] = [(root, iter(sorted(graph.get(root, ()))))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                out.append(component)
    return out
