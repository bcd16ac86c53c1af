"""No module of the product imports itself through others at run time.

Imports for type checking only (`if TYPE_CHECKING:`) do not count; imports inside functions do: a cycle hidden in a
function is still a cycle, it only fails later. The layers between packages are the import contracts' (`lint-imports`,
`pyproject.toml`); this is the same rule inside each package, module by module.
"""

from __future__ import annotations

import grimp

from rag.engine.graph import cycles

PACKAGES = ("chatbot", "rag", "concurrency", "prompts", "infra", "devtools")


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The groups of modules that import each other, through any number of steps (the workflow graph's check). A
    module importing itself by name is not one: a module run as `__main__` does so to reach its own classes."""
    modules = sorted(graph.modules)
    imports = {m: set(graph.find_modules_directly_imported_by(m)) - {m} for m in modules}
    return cycles(dict.fromkeys(modules, ""), imports)


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
