"""Bench records: schema, validation, append-only writing, loading, and the winner.

One import for the three modules that hold them: ladder.recschema (the record format, its
fields beyond docs/DESIGN.md "Bench records", and its validation), ladder.recstore (writing
once or rescuing, reading, listing oldest first) and ladder.recwinner (the winner and why a
record is stale).
"""

from __future__ import annotations

from ladder.recschema import (
    OUTPUT_ERR_KEYS,
    SCHEMA_VERSION,
    SHAPE_RESULT_KEYS,
    STATUSES,
    VERSION_KEYS,
    RecordError,
    validate_record,
)
from ladder.recstore import (
    RESCUE_DIR_ENV,
    TEMP_PREFIX,
    TEMP_SUFFIX,
    RecordNotWritten,
    code_unchanged_since,
    ensure_records_dir,
    load_idea_records,
    load_records,
    read_record,
    rescue_record,
    write_record,
)
from ladder.recwinner import (
    NoWinner,
    Winner,
    current_cases_of,
    current_code_sha_of,
    explain_stale,
    is_baseline,
    prod_ratio,
    rank_score,
    rank_shapes,
    score_text,
    shape_ratio,
    winner,
)

__all__ = [
    "OUTPUT_ERR_KEYS",
    "RESCUE_DIR_ENV",
    "SCHEMA_VERSION",
    "SHAPE_RESULT_KEYS",
    "STATUSES",
    "TEMP_PREFIX",
    "TEMP_SUFFIX",
    "VERSION_KEYS",
    "NoWinner",
    "RecordError",
    "RecordNotWritten",
    "Winner",
    "code_unchanged_since",
    "ensure_records_dir",
    "load_idea_records",
    "load_records",
    "current_cases_of",
    "current_code_sha_of",
    "explain_stale",
    "is_baseline",
    "prod_ratio",
    "rank_score",
    "rank_shapes",
    "read_record",
    "rescue_record",
    "score_text",
    "shape_ratio",
    "validate_record",
    "winner",
    "write_record",
]
