"""Development tools: the LLM simulator (`devtools.simulator`, `manage.py simulate_llm`) and the load tester
(`devtools.loadtest`, `manage.py loadtest`). Production code never imports this package (an import contract in
`pyproject.toml` says so); tests, benchmarks and scripts do.
"""
