"""No module of the product imports itself through others at run time.

Imports for type checking only (`if TYPE_CHECKING:`) do not count; imports inside functions do: a cycle hidden in a
function is still a cycle, it only fails later. The layers between packages are the import contracts' (`lint-imports`,
`pyproject.toml`); this is the same rule inside each package, module by module.
"""

from __future__ import annotations

import grimp

PACKAGES = ("chatbot", "rag", "concurrency", "prompts", "infra", "devtools")


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(graph.find_modules_directly_imported_by(other)))))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == module:
                            break
                    if len(group) > 1:
                        cycles.append(sorted(group))
    return cycles


def test_the_product_has_no_import_cycle() -> None:
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True)
    assert import_cycles(graph) == []


def test_a_cycle_through_a_function_level_import_is_found() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.one", "a.two", "a.three"):
        graph.add_module(module)
    graph.add_import(importer="a.one", imported="a.two")
    graph.add_import(importer="a.two", imported="a.three")
    graph.add_import(importer="a.three", imported="a.one")  # say, inside a function
    graph.add_import(importer="a", imported="a.one")

    assert import_cycles(graph) == [["a.one", "a.three", "a.two"]]
