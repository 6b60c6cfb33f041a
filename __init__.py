"""AgentGOD, a terminal agent factory: the one name it installs.

The modules stay flat at the top of the checkout (one file, one responsibility); installed, they
are this package's modules and are imported through it (`from agentgod import llm`), so no name of
ours can collide with another package's (`llm`, `models`, `config`…). Importing the package
itself imports nothing else: the command's start-up and the sandbox's children pay only for what
they use.
"""
