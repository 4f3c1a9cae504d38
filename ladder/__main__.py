"""``python -m ladder``: the research ladder's command line (see ladder/cli.py)."""

from __future__ import annotations

from ladder.cli import main

if __name__ == "__main__":
    main()
