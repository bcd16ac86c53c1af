import copy
from typing import Any

import pytest

from rag.deps import PipelineDeps
from rag.engine import Node, NodeRegistry, NodeType, ParamSpec, WorkflowDefinition, WorkflowError, compile_workflow
from rag.engine.errors import LoopLimitExceeded
from rag.nodes import build_registry
from rag.workflows import DEFAULT_WORKFLOW, default_workflow
from tests.rag.nodes.support import InMemoryRetriever, answer_text, drain, make_state, make_writer

DEPS = PipelineDeps(retriever=InMemoryRetriever())


def compile_default(data=None, deps=DEPS):
    definition = WorkflowDefinition.from_dict(data) if data is not None else default_workflow()
    return compile_workflow(definition, registry=build_registry(), deps=deps)


def edited(**changes):
    data = copy.deepcopy(DEFAULT_WORKFLOW)
    for key, value in changes.items():
        data[key] = value(data[key]) if callable(value) else value
    return data


def problems_of(data):
    with pytest.raises(WorkflowError) as caught:
        compile_default(data)
    return caught.value.problems


def test_the_default_workflow_compiles():
    graph = compile_default()
    assert graph.node_ids == [n["id"] for n in DEFAULT_WORKFLOW["nodes"]]


def test_default_workflow_round_trips_as_json_data():
    assert default_workflow().to_dict() == WorkflowDefinition.from_dict(DEFAULT_WORKFLOW).to_dict()
    assert default_workflow().fingerprint() == default_workflow().fingerprint()


def test_unknown_node_type():
    data = edited(nodes=lambda nodes: [*nodes, {"id": "spell_check", "type": "spell_checker"}])
    [problem] = [p for p in problems_of(data) if p.code == "unknown_node_type"]
    assert problem.node == "spell_check"
    assert "spell_checker" in problem.message


def test_edge_to_unknown_node():
    data = edited(edges=lambda edges: [*edges, {"source": "planner", "target": "nowhere", "route": "direct"}])
    codes = {(p.code, p.node) for p in problems_of(data)}
    assert ("unknown_node", "planner") in codes


def test_missing_route():
    data = edited(edges=lambda edges: [e for e in edges if not (e["source"] == "planner" and e["route"] == "direct")])
    [problem] = problems_of(data)
    assert (problem.code, problem.node) == ("missing_route", "planner")
    assert "direct" in problem.message


def test_unknown_route():
    data = edited(edges=lambda edges: [*edges, {"source": "planner", "target": "telemetry", "route": "maybe"}])
    [problem] = problems_of(data)
    assert (problem.code, problem.node) == ("unknown_route", "planner")
    assert "maybe" in problem.message


def test_unreachable_node():
    data = edited(nodes=lambda nodes: [*nodes, {"id": "orphan", "type": "telemetry"}])
    data["edges"].append({"source": "orphan", "target": "END"})
    [problem] = problems_of(data)
    assert (problem.code, problem.node) == ("unreachable", "orphan")


def test_unbounded_loop():
    def unbound(edges):
        for edge in edges:
            if edge["route"] == "retry":
                edge.pop("max_visits")
        return edges

    [problem] = problems_of(edited(edges=unbound))
    assert problem.code == "unbounded_loop"
    assert "query_builder" in problem.message and "retrieval_checker" in problem.message


def test_type_mismatch_when_an_input_is_never_written_upstream():
    # Wire the planner straight to the checker: it would read 'retrieved', which nothing before it writes.
    data = copy.deepcopy(DEFAULT_WORKFLOW)
    data["nodes"] = [n for n in data["nodes"] if n["id"] not in ("query_builder", "tool_executor")]
    edges = [e for e in data["edges"] if e["source"] not in ("query_builder", "tool_executor")]
    for edge in edges:
        if edge["source"] == "planner" and edge["route"] == "retrieve":
            edge["target"] = "retrieval_checker"
        if edge["route"] == "retry":
            edge["target"] = "response_synth"
    data["edges"] = edges
    problems = problems_of(data)
    assert {p.code for p in problems} == {"type_mismatch"}
    assert any(p.node == "retrieval_checker" and "'retrieved'" in p.message for p in problems)


def test_bad_param_type():
    def bad(nodes):
        for node in nodes:
            if node["id"] == "guard":
                node["params"] = {"max_chars": "lots"}
        return nodes

    [problem] = problems_of(edited(nodes=bad))
    assert (problem.code, problem.node) == ("bad_param", "guard")
    assert "max_chars" in problem.message


def test_duplicate_node_id():
    data = edited(nodes=lambda nodes: [*nodes, {"id": "planner", "type": "planner"}])
    assert ("duplicate_node", "planner") in {(p.code, p.node) for p in problems_of(data)}


async def test_the_retry_loop_runs_at_most_its_bound():
    graph = compile_default(deps=PipelineDeps(retriever=InMemoryRetriever(chunks=())))
    state = make_state("How do I reset my password?")
    await graph.run(state, make_writer()[0])
    assert state.nodes_run.count("query_builder") == 3  # first pass + 2 retries
    assert state.loops == 2
    assert state.retrieval_verdict == "fallback"
    assert state.nodes_run[-3:] == ["response_synth", "cache_store", "telemetry"]


async def test_a_node_that_keeps_looping_is_stopped_by_the_edge_bound():
    class Again:
        async def run(self, state, writer):
            return "again"

    registry = NodeRegistry()
    registry.register(
        NodeType("looper", {"en": "l", "zh-hant": "l"}, (), (), lambda d, p: Again(), routes=("again", "done"))
    )
    definition = WorkflowDefinition.from_dict(
        {
            "entry": "a",
            "nodes": [{"id": "a", "type": "looper"}],
            "edges": [
                {"source": "a", "target": "a", "route": "again", "max_visits": 3},
                {"source": "a", "target": "END", "route": "done"},
            ],
        }
    )
    graph = compile_workflow(definition, registry=registry, deps=None)
    state = make_state()
    with pytest.raises(LoopLimitExceeded):
        await graph.run(state, make_writer()[0])
    assert state.nodes_run == ["a"] * 4


def never_built(deps: Any, params: dict[str, Any]) -> Node:
    raise AssertionError("a workflow with a bad parameter is refused before any node is built")


def test_bad_param_value_fails_at_build_time():
    registry = NodeRegistry()
    registry.register(
        NodeType(
            "x",
            {"en": "x", "zh-hant": "x"},
            (),
            (),
            never_built,
            params={"n": ParamSpec("int", 1, minimum=1)},
        )
    )
    definition = WorkflowDefinition.from_dict(
        {
            "entry": "x",
            "nodes": [{"id": "x", "type": "x", "params": {"n": 0}}],
            "edges": [{"source": "x", "target": "END"}],
        }
    )
    with pytest.raises(WorkflowError, match="node 'x'"):
        compile_workflow(definition, registry=registry, deps=None)


@pytest.mark.parametrize(
    ("question", "history_turns", "last_nodes"),
    [
        ("如何重設密碼？", [], ["retrieval_checker", "response_synth", "cache_store", "telemetry"]),
        ("今天天氣如何", [], ["planner", "response_synth", "cache_store", "telemetry"]),
        (
            "簡短一點",
            [("user", "如何重設密碼？"), ("assistant", "第一句[1]。第二句很長很長很長[1]。")],
            ["followup_transform", "response_synth", "cache_store", "telemetry"],
        ),
    ],
)
async def test_events_of_a_full_run(question, history_turns, last_nodes):
    from rag.state import Turn

    graph = compile_default()
    state = make_state(question, history=[Turn(r, c) for r, c in history_turns])
    writer, channel = make_writer()
    await graph.run(state, writer)
    writer.finish({"intent": state.intent})
    events = await drain(channel)

    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert all(e["source"] == "ask_stream" and e["request_id"] == "req-1" for e in events)
    assert events[-1]["channel"] == "meta_summary"
    assert [e for e in events if e["channel"] in ("meta_summary", "error")] == [events[-1]]

    statuses = [(e["node"], e["stage"]) for e in events if e["channel"] == "status" and e["stage"] in ("start", "end")]
    expected = [(node, stage) for node in state.nodes_run for stage in ("start", "end")]
    assert statuses == expected
    assert state.nodes_run[-len(last_nodes) :] == last_nodes

    assert answer_text(events) == state.answer
    assert state.answer
    # Answer deltas all come from inside response_synth's start/end.
    seqs = {(e["node"], e["stage"]): e["seq"] for e in events if e["channel"] == "status"}
    answer_seqs = [e["seq"] for e in events if e["channel"] == "answer"]
    assert seqs[("response_synth", "start")] < min(answer_seqs) < max(answer_seqs) < seqs[("response_synth", "end")]


async def test_a_blocked_question_ends_at_telemetry_with_an_error_on_state():
    graph = compile_default()
    state = make_state("   ")
    writer, channel = make_writer()
    await graph.run(state, writer)
    assert state.nodes_run == ["guard", "telemetry"]
    assert state.error is not None and state.error.code == "bad_request"
    events = await drain(channel)
    assert not [e for e in events if e["channel"] == "answer"]


def test_a_workflow_without_retrieval_is_valid():
    # Staff may draft a pipeline that never retrieves: response_synth's retrieval inputs are optional.
    data = {
        "name": "no-retrieval",
        "entry": "guard",
        "nodes": [{"id": n, "type": n} for n in ("guard", "language_normalizer", "planner", "response_synth")],
        "edges": [
            {"source": "guard", "target": "language_normalizer"},
            {"source": "guard", "target": "END", "route": "blocked"},
            {"source": "language_normalizer", "target": "planner"},
            {"source": "planner", "target": "response_synth", "route": "retrieve"},
            {"source": "planner", "target": "response_synth", "route": "followup"},
            {"source": "planner", "target": "response_synth", "route": "direct"},
            {"source": "response_synth", "target": "END"},
        ],
    }
    assert compile_default(data).node_ids == ["guard", "language_normalizer", "planner", "response_synth"]


def test_node_events_are_labelled_with_the_workflow_node_id() -> None:
    from rag.engine import WorkflowDefinition, compile_workflow
    from rag.nodes import build_registry

    definition = WorkflowDefinition.from_dict(
        {
            "name": "renamed",
            "entry": "front_door",
            "nodes": [{"id": "front_door", "type": "guard"}, {"id": "log", "type": "telemetry"}],
            "edges": [
                {"source": "front_door", "target": "log"},
                {"source": "front_door", "route": "blocked", "target": "log"},
                {"source": "log", "target": "END"},
            ],
        }
    )
    graph = compile_workflow(definition, registry=build_registry(), deps=_deps_for_ids())
    node, _routes = graph._steps["front_door"]
    assert getattr(node, "name", None) == "front_door"


def test_a_parameter_the_node_cannot_use_fails_at_build_time_naming_the_node() -> None:
    import pytest

    from rag.engine import WorkflowDefinition, WorkflowError, compile_workflow
    from rag.nodes import build_registry

    definition = WorkflowDefinition.from_dict(
        {
            "name": "bad-regex",
            "entry": "guard",
            "nodes": [{"id": "guard", "type": "guard", "params": {"blocked_patterns": ["(unclosed"]}}],
            "edges": [
                {"source": "guard", "target": "END"},
                {"source": "guard", "route": "blocked", "target": "END"},
            ],
        }
    )
    with pytest.raises(WorkflowError) as info:
        compile_workflow(definition, registry=build_registry(), deps=_deps_for_ids())
    assert info.value.problems[0].node == "guard"
    assert info.value.problems[0].code == "bad_param"


def _deps_for_ids() -> PipelineDeps:
    from rag.deps import PipelineDeps

    class _NoRetriever:
        async def search(self, query, *, limit, language=None, kind=None):
            return []

    return PipelineDeps(retriever=_NoRetriever())
