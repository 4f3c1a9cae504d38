"""``ladder board --plot``: the board's per-shape bandwidth against the copy ceiling, drawn
with matplotlib (imported only when a plot is asked for)."""

from __future__ import annotations

import statistics
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ladder import paths

if TYPE_CHECKING:
    from ladder.board import Board

__all__ = ["FLA_LABEL", "board_figure", "idea_color", "plot_board", "plot_formats", "plot_path"]

FLA_LABEL = "fla (timed beside the ideas, median)"  # the legend's name for fla's bars


def board_figure(board: Board) -> Any:
    """A matplotlib Figure of ``board.shapes``: one panel per direction (fwd, bwd), one group
    of bars per shape name ("prod" first, then in order of first appearance), one bar per idea
    (achieved TB/s = min_bytes / candidate median, labelled with its percentage of its
    record's copy ceiling) plus fla (the median over the ideas' baselines at that shape). A
    segment over each bar marks the copy ceiling of the record the bar comes from (for fla,
    the median of that shape's ceilings, which fla's percentage is of). Raises LadderError
    when there is nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not board.shapes:
        raise paths.LadderError(
            f"no passed {board.family} records on {board.device or 'any device'} to plot; "
            f"bench an idea first"
        )
    names: list[str] = []
    for p in board.shapes:
        if p.shape not in names:
            names.append(p.shape)
    if "prod" in names:
        names.remove("prod")
        names.insert(0, "prod")
    ideas: list[str] = []
    for p in board.shapes:
        if p.idea not in ideas:
            ideas.append(p.idea)
    at = {(p.idea, p.shape): p for p in board.shapes}
    first = {n: next(p for p in board.shapes if p.shape == n) for n in names}
    # long shape names and dims wrap, so neighbouring tick labels never overlap
    ticks = [
        "\n".join(
            [
                *textwrap.wrap(n, 14, break_on_hyphens=True),
                *textwrap.wrap(_dims(first[n].fields), 12),
            ]
        )
        for n in names
    ]
    ceilings = [p.copy_ceiling_TBps for p in board.shapes]
    lo, hi = min(ceilings), max(ceilings)
    span = f"{lo:.2f} TB/s" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f} TB/s"
    series = [*ideas, "fla"]
    width = 0.84 / len(series)

    def x_of(k: int, j: int) -> float:
        return k + (j - (len(series) - 1) / 2) * width

    fig, axes = plt.subplots(
        2, 1, figsize=(max(7.0, 1.6 * len(names) + 2.5), 9.0), layout="constrained"
    )
    for ax, direction in zip(axes, ("fwd", "bwd"), strict=True):
        top, seg_y, seg_x0, seg_x1 = 0.0, [], [], []
        for j, idea in enumerate(ideas):
            pts = [(k, at[idea, n]) for k, n in enumerate(names) if (idea, n) in at]
            xs = [x_of(k, j) for k, _ in pts]
            ys = [getattr(p, f"{direction}_TBps") for _, p in pts]
            bars = ax.bar(xs, ys, width=width, label=idea, color=idea_color(j, len(ideas)))
            ax.bar_label(
                bars,
                [f"{100 * getattr(p, f'{direction}_fraction_of_copy'):.0f}%" for _, p in pts],
                fontsize=6.5,
                padding=1,
            )
            for x, (_, p) in zip(xs, pts, strict=True):
                seg_y.append(p.copy_ceiling_TBps)
                seg_x0.append(x - width / 2)
                seg_x1.append(x + width / 2)
            top = max([top, *ys])
        fx, fy = [], []
        jf = len(series) - 1
        for k, n in enumerate(names):
            here = [at[i, n] for i in ideas if (i, n) in at]
            fx.append(x_of(k, jf))
            fy.append(statistics.median(getattr(p, f"fla_{direction}_TBps") for p in here))
            seg_y.append(statistics.median(p.copy_ceiling_TBps for p in here))
            seg_x0.append(fx[-1] - width / 2)
            seg_x1.append(fx[-1] + width / 2)
        fbars = ax.bar(fx, fy, width=width, label=FLA_LABEL, color="0.6")
        fceil = seg_y[-len(names) :]
        ax.bar_label(
            fbars,
            [f"{100 * y / c:.0f}%" for y, c in zip(fy, fceil, strict=True)],
            fontsize=6.5,
            padding=1,
        )
        ax.hlines(
            seg_y,
            seg_x0,
            seg_x1,
            colors="k",
            linewidth=1.5,
            label=f"copy ceiling of each bar's record ({span})",
        )
        ax.set_ylim(0, 1.12 * max([top, *fy, *seg_y]))
        ax.set_xlim(-0.5, len(names) - 0.5)
        ax.set_xticks(range(len(names)), ticks, fontsize=8)
        ax.set_ylabel(f"{direction} TB/s (min bytes / time)")
        ax.set_title(
            f"{board.family} {direction} on {board.device or 'any device'}: achieved bandwidth, "
            f"% of copy ceiling on the bars",
            fontsize=10,
        )
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncol=len(labels), fontsize=8)
    return fig


# tab20's shades without its greys (14, 15), which fla's grey bars would blur with: the
# nine dark ones (tab10's hues), then the nine light ones
_PALETTE = (0, 2, 4, 6, 8, 10, 12, 16, 18, 1, 3, 5, 7, 9, 11, 13, 17, 19)


def idea_color(j: int, n: int) -> tuple[float, float, float, float]:
    """The bar colour of the j-th of n ideas, distinct for every j < n and never grey (fla's
    bars are grey): matplotlib's tab20 without its greys up to 18 ideas (dark shades first),
    else evenly spaced along turbo."""
    import matplotlib

    if n <= len(_PALETTE):
        return matplotlib.colormaps["tab20"](_PALETTE[j])
    return matplotlib.colormaps["turbo"](j / (n - 1))


def _dims(fields: dict[str, Any]) -> str:
    """The integer shape fields as a tick label: "B16 T8192 D2048 W4" (a case's seed and its
    unset, zero, lower-case fields such as min_len are left out)."""
    return " ".join(
        f"{k}{v}"
        for k, v in fields.items()
        if isinstance(v, int) and not isinstance(v, bool) and k != "seed" and (v or k.isupper())
    )


def plot_formats() -> list[str]:
    """The file suffixes (without the dot, lower case) the plot can be written as: the
    formats of matplotlib's Agg canvas (png, svg, pdf, ...)."""
    from matplotlib.figure import Figure

    return sorted(Figure().canvas.get_supported_filetypes())


def plot_path(path: Path) -> Path:
    """The file :func:`plot_board` writes for ``path``: ``path`` itself when its suffix is a
    format from :func:`plot_formats`, ``path`` + ``.png`` when it has no suffix. Creates
    nothing. Raises LadderError (one line) for another suffix, a folder, or a parent that
    is a file."""
    path = Path(path)
    if path.is_dir():
        raise paths.LadderError(f"--plot {path} is a folder; pass a file name, e.g. board.png")
    if not path.suffix:
        path = path.with_name(path.name + ".png")
    fmt = path.suffix[1:].lower()
    formats = plot_formats()
    if fmt not in formats:
        raise paths.LadderError(
            f"--plot {path}: cannot write a {path.suffix!r} file; end the name in one of "
            f".png, .svg, .pdf (or {', '.join('.' + f for f in formats if f not in _COMMON)})"
        )
    if path.is_dir():
        raise paths.LadderError(f"--plot {path} is a folder; pass a file name, e.g. board.png")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise paths.LadderError(
                    f"--plot {path}: {parent} is a file, not a folder; pick another path"
                )
            break
    return path


_COMMON = ("png", "svg", "pdf")


def plot_board(board: Board, path: Path, root: Path | None = None) -> Path:
    """Write :func:`board_figure` with matplotlib's Agg backend to :func:`plot_path` of
    ``path`` (format from the suffix, ``.png`` added when there is none; parent folders
    created) and return the path written. ``root`` is accepted for callers that pass the
    family root; the data comes from ``board.shapes``. Raises LadderError (one line) when no
    idea has a passed record to plot, for a suffix that is not a plot format, or when the
    file cannot be written."""
    import matplotlib.pyplot as plt

    path = plot_path(path)
    fig = board_figure(board)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110, format=path.suffix[1:].lower())
    except OSError as exc:
        raise paths.LadderError(
            f"--plot {path}: cannot write it: {exc.strerror or type(exc).__name__}"
        ) from None
    except (RuntimeError, ValueError) as exc:  # a format whose writer is missing (pgf: LaTeX)
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise paths.LadderError(f"--plot {path}: matplotlib cannot write it: {reason}") from None
    finally:
        plt.close(fig)
    return path
