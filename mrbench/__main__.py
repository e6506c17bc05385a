"""``python -m mrbench``: the same command line as the ``mrbench`` script."""

from mrbench.cli.app import main

if __name__ == "__main__":
    main()
