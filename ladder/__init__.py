"""The research ladder: numbered kernel ideas per family, bench records, the board.

``import ladder`` installs the idea import finder (``ladder._ideas``) so that an idea can
import another idea's module as ``ladder.kernels.<family>.ideas.i<NNN>``. The command line is
``python -m ladder --help``.
"""

from __future__ import annotations

from ladder._ideas import install as _install_idea_finder

_install_idea_finder()

__all__: list[str] = []
