"""`python -m agentgod`: the same command as the `agentgod` console script."""

from agentgod.main import cli_main

if __name__ == "__main__":
    cli_main()
