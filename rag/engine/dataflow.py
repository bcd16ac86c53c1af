"""Data flow between nodes: the state fields a node can rely on being written whichever way the run came.

A forward must-analysis over the workflow's graph, loops included. A run starts at the entry with only the fields
the caller fills in; what a node can rely on is, intersected over its predecessors, what the predecessor could
rely on plus what it writes. The fixed point is found by narrowing from "everything" until nothing changes, so a
field written on one branch only, or only later in a loop, is not relied on. Build time only: nothing here runs
per request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping

Routes = Mapping[str, Mapping[str, str]]  # source -> route -> target ("END" or a node id)


def written_on_every_path(
    entry: str, nodes: Collection[str], routes_out: Routes, writes: Mapping[str, frozenset[str]]
) -> dict[str, frozenset[str]]:
    """For each of `nodes` (the ones reachable from `entry`): the fields written on every path from the entry to
    it, before it runs. The entry itself gets nothing: the caller's fields are the caller's business."""
    everything = frozenset().union(*(writes.get(node, frozenset()) for node in nodes))
    before = dict.fromkeys(nodes, everything)
    before[entry] = frozenset()
    pending = deque([entry, *(node for node in nodes if node != entry)])
    queued = set(pending)
    while pending:
        node = pending.popleft()
        queued.discard(node)
        after = before[node] | writes.get(node, frozenset())
        for target in routes_out.get(node, {}).values():
            if target == entry or target not in before:  # END; the entry always starts from nothing
                continue
            narrowed = before[target] & after
            if narrowed != before[target]:
                before[target] = narrowed
                if target not in queued:
                    queued.add(target)
                    pending.append(target)
    return before


def path_without_writer(
    entry: str, target: str, field: str, routes_out: Routes, writes: Mapping[str, frozenset[str]]
) -> list[tuple[str, str]] | None:
    """A shortest path from `entry` to `target` on which no node before `target` writes `field`, as
    [(node, route it leaves by), ..., (target, "")]; None when every path writes it."""
    if target == entry:
        return [(entry, "")]
    came_from: dict[str, tuple[str, str] | None] = {entry: None}
    queue = deque([entry])
    while queue:
        node = queue.popleft()
        if field in writes.get(node, frozenset()):
            continue  # past this node the field is written
        for route, nxt in sorted(routes_out.get(node, {}).items()):
            if nxt in came_from:
                continue
            came_from[nxt] = (node, route)
            if nxt == target:
                path = [(target, "")]
                step = came_from[target]
                while step is not None:
                    path.append(step)
                    step = came_from[step[0]]
                return path[::-1]
            queue.append(nxt)
    return None


def describe_path(path: list[tuple[str, str]]) -> str:
    """guard --blocked--> planner: the notation of LoopLimitExceeded's messages."""
    return "".join(node if not route else f"{node} --{route}--> " for node, route in path)
