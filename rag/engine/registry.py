"""The node catalogue: every node type says what it reads, writes, which routes it takes and its parameters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rag.events import StreamWriter
    from rag.state import PipelineState


class Node(Protocol):
    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        """Do the node's work on `state`; return the route to take (None for the default route)."""
        ...


PARAM_TYPES: dict[str, tuple[type[Any], ...]] = {
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
    "list": (list,),
}


@dataclass(frozen=True, slots=True)
class ParamSpec:
    type: str  # int | float | bool | str | list
    default: Any
    description: str = ""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()

    def check(self, name: str, value: Any) -> str | None:
        """A problem with `value`, or None when it fits."""
        kinds = PARAM_TYPES[self.type]
        if isinstance(value, bool) and self.type != "bool":
            return f"parameter '{name}' must be {self.type}, got bool"
        if not isinstance(value, kinds):
            return f"parameter '{name}' must be {self.type}, got {type(value).__name__}"
        if self.minimum is not None and value < self.minimum:
            return f"parameter '{name}' must be >= {self.minimum}"
        if self.maximum is not None and value > self.maximum:
            return f"parameter '{name}' must be <= {self.maximum}"
        if self.choices and value not in self.choices:
            return f"parameter '{name}' must be one of {', '.join(self.choices)}"
        return None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "default": self.default, "description": self.description}
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        if self.choices:
            out["choices"] = list(self.choices)
        return out


NodeFactory = Callable[[Any, dict[str, Any]], "Node"]


@dataclass(frozen=True, slots=True)
class NodeType:
    name: str
    description: dict[str, str]  # {"en": ..., "zh-hant": ...}
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    factory: NodeFactory  # (deps, params) -> Node
    routes: tuple[str, ...] = ("default",)
    params: dict[str, ParamSpec] = field(default_factory=dict)
    # Read when an upstream node wrote them, with a meaningful default otherwise (not checked for a producer).
    optional_inputs: tuple[str, ...] = ()

    def resolve_params(self, given: dict[str, Any]) -> dict[str, Any]:
        return {name: given.get(name, spec.default) for name, spec in self.params.items()}

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": dict(self.description),
            "inputs": list(self.inputs),
            "optional_inputs": list(self.optional_inputs),
            "outputs": list(self.outputs),
            "routes": list(self.routes),
            "params": {name: spec.as_dict() for name, spec in self.params.items()},
        }


class NodeRegistry:
    def __init__(self) -> None:
        self._types: dict[str, NodeType] = {}

    def register(self, node_type: NodeType) -> NodeType:
        if node_type.name in self._types:
            raise ValueError(f"node type {node_type.name!r} is registered twice")
        self._types[node_type.name] = node_type
        return node_type

    def get(self, name: str) -> NodeType | None:
        return self._types.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def names(self) -> list[str]:
        return sorted(self._types)

    def catalogue(self) -> list[dict[str, Any]]:
        return [self._types[name].as_dict() for name in self.names()]
