"""What the pipeline nodes' LLM paths share: prompts, call options, usage accounting, numbered sources and the
reading of follow-up instructions. Nodes import from the submodules; nothing here touches Django or the ORM.
"""
