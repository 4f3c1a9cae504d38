"""``python -m ladder``: the research ladder's command line (see ladder/cli.py)."""

from __future__ import annotations

try:
    from ladder.cli import main
except ModuleNotFoundError as exc:  # typer, rich, torch, ... missing: not this interpreter
    if exc.name is None or exc.name.split(".")[0] == "ladder":
        raise
    raise SystemExit(
        f"ladder: this Python lacks {exc.name!r}; run `make setup`, then use .venv/bin/python "
        "(or `source .venv/bin/activate`)"
    ) from None

if __name__ == "__main__":
    main()
