"""``python -m orchestrator.cli``: the same as ``tieredctl`` (the local cluster starts its processes this way)."""

from orchestrator.cli.root import main

if __name__ == "__main__":
    main()
