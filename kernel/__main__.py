"""``python -m hermes``: the ``hermes`` command (the same entry point as the script)."""

from hermes.cli import main

if __name__ == "__main__":
    main()
