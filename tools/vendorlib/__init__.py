"""The vendor as small passes, shared by tools/vendor.py and tools/drift.py.

The vendor is a pure function of (repository objects at a commit, one bench record, the tool's
own code, libcst and ruff): :func:`build` reads every input with git from the commit, so the
working tree never leaks into the package, and drift can re-run it in memory to check that the
package is exactly what its recorded source produces.

One module per concern, each with its own tests (tests/vendor/):

- :mod:`.common`: VendorError, the repository root, name forms;
- :mod:`.gitread`: git reads at a commit (blobs, trees, status, shallow clones);
- :mod:`.source`: source bytes to text (UTF-8, BOM, line endings), LF always;
- :mod:`.spec`: the family contract read as literals from family.py;
- :mod:`.evaluate`: the three-valued evaluator (known true, known false, unknown);
- :mod:`.freeze`: knobs to literals, the branches they decide removed;
- :mod:`.usage`: module-level definitions and uses;
- :mod:`.prune`: what the freeze made unused (in an imported module: whatever the entry
  module does not reach), removed to a fixed point;
- :mod:`.comments`: own-line comments and pragmas of removed statements kept, fmt pairs checked;
- :mod:`.imports`: imports between ideas found and rewritten package-relative;
- :mod:`.fmt`: ``ruff format`` under the commit's configuration;
- :mod:`.provenance`: ``_provenance.py`` rendered and parsed, the tool's fingerprint;
- :mod:`.write`: the package written all files or none, and read back;
- :mod:`.build`: the composition of the passes.

Every refusal is a :class:`VendorError` with a one-line message.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The passes import ladder.knobs and ladder.records: the repository root goes on sys.path
# before any of them is imported.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from .build import (  # noqa: E402
    InventoryRow,
    VendorResult,
    build,
    check_record,
    idea_lookups,
    rebench_hint,
    record_relpath,
)
from .common import IDEA_RE, TOOL_ROOT, VendorError  # noqa: E402
from .fmt import format_python  # noqa: E402
from .gitread import (  # noqa: E402
    check_repo,
    dirty_paths,
    git,
    is_shallow,
    list_tree,
    read_blob,
    resolve_commit,
    sha256,
)
from .provenance import (  # noqa: E402
    PROVENANCE_KEYS,
    ProvenanceError,
    libcst_version,
    parse_provenance,
    render_provenance,
    ruff_version,
    tool_files,
    tool_sha256,
)
from .source import content_sha256, normalise_newlines, source_text  # noqa: E402
from .spec import (  # noqa: E402
    FamilySpec,
    idea_folders,
    load_family_spec,
    parse_family_spec,
    resolve_idea_ref,
    unmapped_idea,
)
from .write import (  # noqa: E402
    STAGING_PREFIX,
    current_outputs,
    remove_stale_staging,
    staging_leftovers,
    unified_diff,
    write_outputs,
)

__all__ = [
    "IDEA_RE",
    "PROVENANCE_KEYS",
    "STAGING_PREFIX",
    "TOOL_ROOT",
    "FamilySpec",
    "InventoryRow",
    "ProvenanceError",
    "VendorError",
    "VendorResult",
    "build",
    "check_record",
    "idea_lookups",
    "current_outputs",
    "dirty_paths",
    "format_python",
    "git",
    "idea_folders",
    "is_shallow",
    "libcst_version",
    "list_tree",
    "load_family_spec",
    "normalise_newlines",
    "content_sha256",
    "parse_family_spec",
    "parse_provenance",
    "read_blob",
    "rebench_hint",
    "record_relpath",
    "remove_stale_staging",
    "render_provenance",
    "check_repo",
    "resolve_commit",
    "resolve_idea_ref",
    "ruff_version",
    "sha256",
    "source_text",
    "staging_leftovers",
    "tool_files",
    "tool_sha256",
    "unified_diff",
    "unmapped_idea",
    "write_outputs",
]
