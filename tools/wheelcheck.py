"""Build the kernel-fun wheel from a clean copy of package/ and check what it ships.

    python tools/wheelcheck.py build [--outdir dist]     build, then check
    python tools/wheelcheck.py check WHEEL               check a built wheel

A build in package/ itself reuses package/build/, where setuptools keeps every module it ever
copied: a module deleted from the source would still ship. So ``build`` copies the package's
tracked files (``git ls-files package``; every file when git has none) into a temporary folder
and builds there. ``check`` compares the wheel's ``kernel_fun/`` files with the package's
source files (``package/src/kernel_fun/**/*.py``, tracked, no bytecode): exactly the same
set, each with the same bytes, and nothing else but the ``.dist-info`` folder.

Exit status: 0 good, 1 the wheel is not the source, 2 usage error or failed build.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Annotated

import typer

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "package"
SRC = "package/src"

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0], rich_markup_mode=None)


class WheelError(Exception):
    """One line: what is wrong with the wheel (exit 1)."""


def package_files(root: Path) -> list[str]:
    """Repo-relative paths of the files under package/ that a build may read: git's tracked
    files when ``root`` is a git work tree, else every file but bytecode and build outputs."""
    proc = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--", PACKAGE],
        capture_output=True,
        check=False,
    )
    if proc.returncode == 0 and proc.stdout:
        names = [n.decode() for n in proc.stdout.split(b"\0") if n]
        return sorted(n for n in names if (root / n).is_file())
    skip = {"build", "dist", "__pycache__"}
    return sorted(
        p.relative_to(root).as_posix()
        for p in (root / PACKAGE).rglob("*")
        if p.is_file()
        and not skip & set(p.relative_to(root).parts)
        and not any(part.endswith(".egg-info") for part in p.parts)
        and p.suffix != ".pyc"
    )


def source_modules(root: Path) -> dict[str, bytes]:
    """{wheel path (``kernel_fun/...``): bytes} of the package's Python sources."""
    out: dict[str, bytes] = {}
    for rel in package_files(root):
        if rel.startswith(SRC + "/kernel_fun/") and rel.endswith(".py"):
            out[rel[len(SRC) + 1 :]] = (root / rel).read_bytes()
    return out


def check_wheel(wheel: Path, root: Path) -> None:
    """Raise WheelError unless the wheel's files are exactly the package's sources."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            shipped = {n: zf.read(n) for n in zf.namelist() if not n.endswith("/")}
    except (OSError, zipfile.BadZipFile) as exc:
        raise WheelError(f"{wheel}: not a readable wheel ({exc})") from None
    want = source_modules(root)
    code = {n: b for n, b in shipped.items() if not n.split("/", 1)[0].endswith(".dist-info")}
    extra = sorted(set(code) - set(want))
    missing = sorted(set(want) - set(code))
    if extra:
        raise WheelError(
            f"{wheel.name} ships {extra[0]} ({len(extra)} file(s)), which is not a source file "
            f"of {SRC}; build it from a clean copy of the package with `make wheel`"
        )
    if missing:
        raise WheelError(
            f"{wheel.name} lacks {missing[0]} ({len(missing)} file(s)); a folder without "
            "__init__.py drops out of the wheel: add one"
        )
    differ = sorted(n for n in want if code[n] != want[n])
    if differ:
        raise WheelError(
            f"{wheel.name}: {differ[0]} differs from {SRC}/{differ[0]} ({len(differ)} file(s)); "
            "rebuild from this tree"
        )


def build_wheel(root: Path, outdir: Path) -> Path:
    """Build the wheel from a temporary copy of the package's files; the wheel's path."""
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kernel-fun-wheel-") as tmp:
        tree = Path(tmp) / "tree"
        for rel in package_files(root):
            target = tree / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, target)
        built = Path(tmp) / "dist"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "--disable-pip-version-check",
                "--quiet",
                "--wheel-dir",
                str(built),
                str(tree / PACKAGE),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            last = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            raise RuntimeError(f"the wheel build failed: {last[-1] if last else proc.returncode}")
        (wheel,) = built.glob("*.whl")
        dest = outdir / wheel.name
        shutil.copy2(wheel, dest)
    return dest


@app.command()
def build(
    outdir: Annotated[Path, typer.Option("--outdir", help="where the wheel goes")] = Path("dist"),
    repo: Annotated[Path, typer.Option("--repo", help="repository root")] = ROOT,
) -> None:
    """Build the wheel from a clean copy of package/, then check it."""
    try:
        wheel = build_wheel(repo.resolve(), outdir)
    except RuntimeError as exc:
        typer.echo(f"wheelcheck: {exc}", err=True)
        raise typer.Exit(2) from None
    _check(wheel, repo.resolve())


@app.command()
def check(
    wheel: Annotated[Path, typer.Argument(help="the .whl to check")],
    repo: Annotated[Path, typer.Option("--repo", help="repository root")] = ROOT,
) -> None:
    """Check that WHEEL ships exactly the package's source files."""
    if not wheel.is_file():
        typer.echo(f"wheelcheck: {wheel} is not a file; build it with `make wheel`", err=True)
        raise typer.Exit(2)
    _check(wheel, repo.resolve())


def _check(wheel: Path, root: Path) -> None:
    try:
        check_wheel(wheel, root)
    except WheelError as exc:
        typer.echo(f"wheelcheck: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"{wheel}: {len(source_modules(root))} source files, nothing else")


if __name__ == "__main__":
    app()
