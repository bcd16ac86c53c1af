"""The process's pipeline runtime, handed over where the app is assembled to the modules that serve with it.

`rag.wiring` builds the runtime from the settings, lazily and once per process. Only the places where the app is
assembled import the wiring (the ASGI entry point `chatbot.asgi`, a management command's `handle`, the tests'
conftest); each hands its getter over here with `provide_runtime(wiring.get_runtime)`. The modules that start
runs, run jobs, keep the replicas in step or apply published workflows (`chatbot.streaming`,
`rag.documents.runner`, `rag.replica`, `rag.workflows`) call `get_runtime()` from here, so none of them depends on
the settings-reading composition root, and an import contract says so.

What is handed over is the getter, not a runtime: the runtime is still built at its first use, and a reset
(`rag.wiring.reset_runtime`) is seen by every caller.
"""

from __future__ import annotations

from collections.abc import Callable

from rag.runtime import PipelineRuntime

__all__ = ["RuntimeGetter", "RuntimeNotProvided", "get_runtime", "provide_runtime", "runtime_provided"]

RuntimeGetter = Callable[[], PipelineRuntime]

_getter: RuntimeGetter | None = None


class RuntimeNotProvided(RuntimeError):
    """A runtime was asked for in a process whose assembly point handed none over."""


def provide_runtime(getter: RuntimeGetter) -> None:
    """Hand the process's runtime getter to the modules that serve (idempotent: the last one given wins)."""
    global _getter
    _getter = getter


def runtime_provided() -> bool:
    return _getter is not None


def get_runtime() -> PipelineRuntime:
    """The process's pipeline runtime, from the getter the assembly point provided."""
    if _getter is None:
        raise RuntimeNotProvided(
            "no pipeline runtime was provided to this process: where the app is assembled (chatbot.asgi, a "
            "management command's handle) call rag.provider.provide_runtime(rag.wiring.get_runtime)"
        )
    return _getter()
