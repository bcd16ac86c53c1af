from rag.deps import PipelineDeps
from rag.nodes import NODE_TYPES, build_registry
from rag.state import STATE_FIELDS
from tests.rag.nodes.support import InMemoryRetriever


def test_every_node_type_is_registered_once():
    registry = build_registry()
    assert registry.names() == sorted(t.name for t in NODE_TYPES)
    assert len(registry.names()) == 13


def test_catalogue_entries_are_bilingual_and_use_real_state_fields():
    for entry in build_registry().catalogue():
        assert entry["description"]["en"] and entry["description"]["zh-hant"], entry["name"]
        assert set(entry["inputs"]) <= STATE_FIELDS, entry["name"]
        assert set(entry["outputs"]) <= STATE_FIELDS, entry["name"]
        assert entry["routes"], entry["name"]


def test_every_default_parameter_is_valid_and_every_factory_builds():
    deps = PipelineDeps(retriever=InMemoryRetriever())
    for node_type in NODE_TYPES:
        for name, spec in node_type.params.items():
            assert spec.check(name, spec.default) is None, (node_type.name, name)
        node = node_type.factory(deps, node_type.resolve_params({}))
        assert callable(node.run)
        assert getattr(node, "name", None) == node_type.name
