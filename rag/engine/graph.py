"""Validation, compilation and the run loop.

Everything that can be wrong with a workflow is found by `validate_workflow` when the graph is built, and
reported as problems that name the node: the run loop itself does no checking beyond following routes.
"""

from __future__ import annotations

from collections import defaultdict
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol

from rag.engine.dataflow import describe_path, path_without_writer, written_on_every_path
from rag.engine.definition import DEFAULT_ROUTE, END, WorkflowDefinition
from rag.engine.errors import LoopLimitExceeded, WorkflowError, WorkflowProblem
from rag.engine.registry import Node, NodeRegistry
from rag.state import REQUEST_FIELDS, STATE_FIELDS

if TYPE_CHECKING:
    from rag.events import StreamWriter
    from rag.state import PipelineState


def validate_workflow(definition: WorkflowDefinition, registry: NodeRegistry) -> list[WorkflowProblem]:
    """Every problem of the workflow, each naming its node. The wiring is checked first (ids, parameters, edges,
    routes); the shape (reachability, loops, ends) and the data flow only once the wiring is sound."""
    problems: list[WorkflowProblem] = []
    ids = _check_ids(definition, problems)
    _check_params(definition, registry, problems)
    routes_out = _check_edges(definition, ids, problems)
    _check_routes(definition, registry, routes_out, problems)
    if problems:
        return problems
    successors: dict[str, set[str]] = {node_id: set(routes_out.get(node_id, {}).values()) for node_id in ids}
    reachable = _check_shape(definition, ids, successors, problems)
    _check_dataflow(definition, registry, ids, routes_out, successors, reachable, problems)
    return problems


def _check_ids(definition: WorkflowDefinition, problems: list[WorkflowProblem]) -> dict[str, str]:
    """Node ids are unique and not reserved, and the entry is one of them; returns id -> node type."""
    ids: dict[str, str] = {}
    for spec in definition.nodes:
        if spec.id == END:
            problems.append(
                WorkflowProblem("reserved_id", f"node id '{END}' is reserved for the end of the graph", spec.id)
            )
        elif spec.id in ids:
            problems.append(WorkflowProblem("duplicate_node", f"node id '{spec.id}' is used twice", spec.id))
        ids[spec.id] = spec.type
    if definition.entry not in ids:
        problems.append(WorkflowProblem("unknown_entry", f"entry '{definition.entry}' is not a node of the workflow"))
    return ids


def _check_params(definition: WorkflowDefinition, registry: NodeRegistry, problems: list[WorkflowProblem]) -> None:
    """Every node has a known type, and only parameters of that type with values it accepts."""
    add = problems.append
    for spec in definition.nodes:
        node_type = registry.get(spec.type)
        if node_type is None:
            add(WorkflowProblem("unknown_node_type", f"node '{spec.id}' has unknown type '{spec.type}'", spec.id))
            continue
        for name, value in spec.params.items():
            param = node_type.params.get(name)
            if param is None:
                add(WorkflowProblem("unknown_param", f"node '{spec.id}' has unknown parameter '{name}'", spec.id))
            elif (why := param.check(name, value)) is not None:
                add(WorkflowProblem("bad_param", f"node '{spec.id}': {why}", spec.id))


def _check_edges(
    definition: WorkflowDefinition, ids: dict[str, str], problems: list[WorkflowProblem]
) -> dict[str, dict[str, str]]:
    """Edges join known nodes (or the end), one per route of a node; returns node -> route -> target."""
    add = problems.append
    routes_out: dict[str, dict[str, str]] = defaultdict(dict)
    for edge in definition.edges:
        if edge.source not in ids:
            add(WorkflowProblem("unknown_node", f"edge from unknown node '{edge.source}'", edge.source))
            continue
        if edge.target != END and edge.target not in ids:
            message = f"edge from '{edge.source}' to unknown node '{edge.target}'"
            add(WorkflowProblem("unknown_node", message, edge.source))
            continue
        if edge.route in routes_out[edge.source]:
            message = f"node '{edge.source}' has two edges for route '{edge.route}'"
            add(WorkflowProblem("duplicate_route", message, edge.source))
        routes_out[edge.source][edge.route] = edge.target
    return routes_out


def _check_routes(
    definition: WorkflowDefinition,
    registry: NodeRegistry,
    routes_out: dict[str, dict[str, str]],
    problems: list[WorkflowProblem],
) -> None:
    """Each node has an edge for every route its type declares, and none for a route it does not."""
    add = problems.append
    for spec in definition.nodes:
        node_type = registry.get(spec.type)
        if node_type is None:
            continue
        declared = set(node_type.routes)
        wired = routes_out.get(spec.id, {})
        for route in node_type.routes:
            if route not in wired:
                what = "an outgoing edge" if route == DEFAULT_ROUTE else f"an edge for route '{route}'"
                add(WorkflowProblem("missing_route", f"node '{spec.id}' ({spec.type}) needs {what}", spec.id))
        for route in wired:
            if route not in declared:
                routes = ", ".join(sorted(declared))
                message = f"node '{spec.id}' ({spec.type}) has no route '{route}'; it has {routes}"
                add(WorkflowProblem("unknown_route", message, spec.id))


def _check_shape(
    definition: WorkflowDefinition,
    ids: dict[str, str],
    successors: dict[str, set[str]],
    problems: list[WorkflowProblem],
) -> set[str]:
    """Every node is reachable from the entry and reaches the end; every loop has a bounded edge. Returns the
    nodes reachable from the entry."""
    add = problems.append
    reachable = _reach(definition.entry, successors)
    for node_id in ids:
        if node_id not in reachable:
            add(
                WorkflowProblem("unreachable", f"node '{node_id}' cannot be reached from '{definition.entry}'", node_id)
            )
    unbounded: dict[str, set[str]] = defaultdict(set)
    for edge in definition.edges:
        if edge.max_visits is None and edge.target != END:
            unbounded[edge.source].add(edge.target)
    for cycle in cycles(ids, unbounded):
        path = " -> ".join([*cycle, cycle[0]])
        message = f"loop {path} has no bounded edge (set max_visits on one of its edges)"
        add(WorkflowProblem("unbounded_loop", message, cycle[0]))
    for node_id in reachable:
        if node_id != END and END not in _reach(node_id, successors):
            add(WorkflowProblem("no_end", f"node '{node_id}' has no path to {END}", node_id))
    return reachable


def _check_dataflow(
    definition: WorkflowDefinition,
    registry: NodeRegistry,
    ids: dict[str, str],
    routes_out: dict[str, dict[str, str]],
    successors: dict[str, set[str]],
    reachable: set[str],
    problems: list[WorkflowProblem],
) -> None:
    """Every input must be a request field or be written on every path from the entry to the node."""
    add = problems.append
    predecessors: dict[str, set[str]] = defaultdict(set)
    for source, targets in successors.items():
        for target in targets:
            predecessors[target].add(source)
    writes: dict[str, frozenset[str]] = {}
    for node_id in reachable - {END}:
        node_type = registry.get(ids[node_id])
        writes[node_id] = frozenset(node_type.outputs) if node_type is not None else frozenset()
    written = written_on_every_path(definition.entry, writes.keys(), routes_out, writes)
    for spec in definition.nodes:
        node_type = registry.get(spec.type)
        if node_type is None or spec.id not in reachable:
            continue
        for name in (*node_type.inputs, *node_type.optional_inputs, *node_type.outputs):
            if name not in STATE_FIELDS:
                add(WorkflowProblem("type_mismatch", f"node '{spec.id}' uses unknown state field '{name}'", spec.id))
        missing = [
            name
            for name in node_type.inputs
            if name in STATE_FIELDS and name not in REQUEST_FIELDS and name not in written[spec.id]
        ]
        if missing:
            # Nodes that can run before this one (itself too when it sits on a loop), to name the writers.
            ancestors = set().union(*(_reach(p, predecessors) for p in predecessors.get(spec.id, ())))
            for name in missing:
                message = _unwritten_input(definition.entry, spec.id, spec.type, name, routes_out, writes, ancestors)
                add(WorkflowProblem("type_mismatch", message, spec.id))


def _unwritten_input(
    entry: str,
    node_id: str,
    node_type: str,
    name: str,
    routes_out: dict[str, dict[str, str]],
    writes: dict[str, frozenset[str]],
    ancestors: set[str],
) -> str:
    """The type_mismatch message: the node, the field, and a path from the entry on which nothing writes it."""
    reads = f"node '{node_id}' ({node_type}) reads '{name}'"
    writers = sorted(n for n in ancestors if name in writes.get(n, ()))
    path = path_without_writer(entry, node_id, name, routes_out, writes)
    if path is None:  # not when the analysis found the field missing; said plainly all the same
        where = f"a path from '{entry}'"
    elif len(path) == 1:
        where = "it is the entry node, where a run has only the request's fields"
    else:
        where = f"path {describe_path(path)}"
    if not writers:
        return f"{reads} but no node before it writes it ({where})"
    if path is None or len(path) == 1:
        return f"{reads} but {where}; only {_names(writers)} write it, later"
    return (
        f"{reads} but not every path to it writes it: on {where}, arriving from predecessor '{path[-2][0]}', "
        f"no node writes it (only {_names(writers)} on other paths)"
    )


def _names(ids: list[str]) -> str:
    return ", ".join(f"'{i}'" for i in ids)


def _reach(start: str, successors: dict[str, set[str]]) -> set[str]:
    seen = {start}
    stack = [start]
    while stack:
        for nxt in successors.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def cycles(nodes: dict[str, str], successors: dict[str, set[str]]) -> list[list[str]]:
    """One representative cycle per strongly connected component that has one (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(successors.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop(0)
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(successors.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in successors.get(node, ()):
                    found.append(sorted(component))
    return found


class RunObserver(Protocol):
    """Told when each node starts and ends (telemetry). Called on the event loop: it must only record, never wait.

    A node that raises gets `node_started` without `node_finished`; the observer's owner closes it at the end.
    """

    def node_started(self, node_id: str) -> None: ...

    def node_finished(self, node_id: str, route: str, ms: float) -> None: ...


class CompiledGraph:
    """A validated workflow with its node instances; `run` is the hot path and does as little as it can."""

    __slots__ = ("_bounds", "_entry", "_steps", "definition", "fingerprint")

    def __init__(
        self,
        definition: WorkflowDefinition,
        fingerprint: str,
        steps: dict[str, tuple[Node, dict[str, str]]],
        bounds: dict[tuple[str, str], int],
    ) -> None:
        self.definition = definition
        self.fingerprint = fingerprint
        self._entry = definition.entry
        self._steps = steps
        self._bounds = bounds

    @property
    def node_ids(self) -> list[str]:
        return list(self._steps)

    async def run(self, state: PipelineState, writer: StreamWriter, observer: RunObserver | None = None) -> None:
        steps = self._steps
        bounds = self._bounds
        visits: dict[tuple[str, str], int] = {}
        current = self._entry
        while current != END:
            node, routes = steps[current]
            await writer.status(current, "start")
            if observer is not None:
                observer.node_started(current)
            started = perf_counter()
            route = await node.run(state, writer) or DEFAULT_ROUTE
            state.nodes_run.append(current)
            target = routes.get(route)
            if target is None:
                raise RuntimeError(f"node '{current}' returned route '{route}', which the workflow does not wire")
            ms = round((perf_counter() - started) * 1000, 2)
            await writer.status(current, "end", route=route, ms=ms)
            if observer is not None:
                observer.node_finished(current, route, ms)
            if bounds:
                key = (current, route)
                limit = bounds.get(key)
                if limit is not None:
                    visits[key] = taken = visits.get(key, 0) + 1
                    if taken > limit:
                        raise LoopLimitExceeded(f"edge {current} --{route}--> {target} taken more than {limit} times")
            current = target


def compile_workflow(
    definition: WorkflowDefinition, *, registry: NodeRegistry, deps: Any, fingerprint: str = ""
) -> CompiledGraph:
    problems = validate_workflow(definition, registry)
    if problems:
        raise WorkflowError(problems)
    routes: dict[str, dict[str, str]] = defaultdict(dict)
    bounds: dict[tuple[str, str], int] = {}
    for edge in definition.edges:
        routes[edge.source][edge.route] = edge.target
        if edge.max_visits is not None:
            bounds[(edge.source, edge.route)] = edge.max_visits
    steps: dict[str, tuple[Node, dict[str, str]]] = {}
    problems = []
    for spec in definition.nodes:
        node_type = registry.get(spec.type)
        assert node_type is not None  # validated above
        try:
            node = node_type.factory(deps, node_type.resolve_params(spec.params))
        except (ValueError, TypeError) as exc:
            # A parameter that type-checks but cannot be used (a bad regex, say) is still the workflow's fault.
            problems.append(WorkflowProblem("bad_param", f"node '{spec.id}': {exc}", spec.id))
            continue
        if getattr(node, "name", spec.id) != spec.id:
            # Nodes label their events with `name`: make it the workflow's id, which may differ from the type.
            node.name = spec.id  # type: ignore[attr-defined]
        steps[spec.id] = (node, dict(routes[spec.id]))
    if problems:
        raise WorkflowError(problems)
    return CompiledGraph(definition, fingerprint or definition.fingerprint(), steps, bounds)
