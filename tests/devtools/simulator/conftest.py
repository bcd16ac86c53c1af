from tests.devtools.simulator.fixtures import (  # noqa: F401 (fixtures are found by name)
    llm_base_url,
    llm_client,
    shared_simulator,
    simulator,
    simulator_factory,
)
