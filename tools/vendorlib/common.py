"""What every pass of the vendor shares: the one error type, the repository root, name forms.

Every refusal is a :class:`VendorError` whose ``str`` is one line saying what is wrong and
what to do (``path:line: ...`` where a source line is at fault); the CLIs print it and exit 2.
"""

from __future__ import annotations

import re
from pathlib import Path

TOOL_ROOT = Path(__file__).resolve().parents[2]

IDEA_RE = re.compile(r"^(\d{3})-[a-z0-9]+(?:-[a-z0-9]+)*$")
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
IDEA_MODULE = re.compile(r"^ladder\.kernels\.([a-z][a-z0-9_]*)\.ideas\.i(\d{3})(?:\.(\w+))?$")


class VendorError(Exception):
    """A refusal or configuration error; ``str(err)`` is one line saying what and what to do."""

    exit_code = 2
