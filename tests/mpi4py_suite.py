"""Run mpi4py's own test suite against gloocy.MPI and against mpi4py on MPICH,
and count, file by file, how many of the tests MPICH passes gloocy passes.

    python tests/mpi4py_suite.py [FILE ...] [-n 1 2 3] [--out DIR]

FILE is a test module of mpi4py's sdist (``test_cco_buf``...); default: all
of them. The sdist (4.1.2) is downloaded with pip into ``--cache`` once.
gloocy runs it under ``gloocy-run`` with only the import changed: a package
named ``mpi4py`` whose ``MPI`` is ``gloocy.MPI`` (written into the cache,
beside the sdist's pure-Python ``util`` and ``futures``). MPICH runs it
under ``mpiexec`` with the real mpi4py. A test passes in a run when every
rank reports it ``ok``; a run that crashes or times out passes nothing it
did not report. MPICH's results are kept in ``--out`` and reused
(``--fresh`` runs them again).

Not part of the pytest suite: a full run takes tens of minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import defaultdict
from pathlib import Path

VERSION = "4.1.2"
RESULT = re.compile(r"^(?:\[(\d+)\]\s*)?(\S+) \(([\w.]+)\).*\.\.\. "
                    r"(ok|FAIL|ERROR|skipped|expected failure|unexpected success)")
SEVERITY = ["ok", "expected failure", "skipped", "missing", "unexpected success",
            "FAIL", "ERROR"]
SHIM = '''"""mpi4py's name over gloocy.MPI, to run mpi4py's own tests against it.

As in mpi4py, importing the package does not import MPI: a program may set
rc (rc.initialize = False...) first; mpi4py/MPI.py is gloocy.MPI.
"""
import sys
import types

rc = types.SimpleNamespace(initialize=True, threads=True, thread_level="multiple",
                           finalize=None, fast_reduce=True, recv_mprobe=True,
                           irecv_bufsz=32768, errors="exception")
sys.modules["mpi4py.rc"] = rc
__version__ = "%s"


def get_include():
    return ""


def get_config():
    return {}
''' % VERSION
SHIM_MPI = '''"""mpi4py.MPI: gloocy.MPI under mpi4py's name."""
import sys

import gloocy.MPI

sys.modules[__name__] = gloocy.MPI
'''


def sdist(cache: Path) -> Path:
    """The unpacked sdist, downloaded the first time."""
    root = cache / f"mpi4py-{VERSION}"
    if not (root / "test" / "main.py").exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                        "--no-binary", ":all:", f"mpi4py=={VERSION}", "-d",
                        str(cache)], check=True, stdout=subprocess.DEVNULL)
        with tarfile.open(cache / f"mpi4py-{VERSION}.tar.gz") as tar:
            tar.extractall(cache, filter="data")
    return root


def shim(cache: Path, root: Path) -> Path:
    """A directory holding the package ``mpi4py`` that is gloocy.MPI."""
    where = cache / "shim"
    package = where / "mpi4py"
    if not (package / "__init__.py").exists():
        package.mkdir(parents=True, exist_ok=True)
        for part in ("util", "futures"):
            shutil.copytree(root / "src" / "mpi4py" / part, package / part,
                            dirs_exist_ok=True)
    for name, text in (("__init__.py", SHIM), ("MPI.py", SHIM_MPI)):
        path = package / name
        if not path.exists() or path.read_text() != text:
            fresh = path.with_suffix(".tmp")   # replaced whole: others may be reading
            fresh.write_text(text)
            fresh.replace(path)
    return where


def run(impl: str, name: str, n: int, root: Path, shim_dir: Path,
        timeout: float) -> dict:
    """{test id: passed on every rank} for one file at n ranks."""
    main = [sys.executable, "main.py", "--no-builddir", "-v", name]
    if impl == "gloocy":
        cmd = ["gloocy-run", "-n", str(n)] + main[:2] + ["--path", str(shim_dir)] + main[2:]
    else:   # one file per rank: MPICH prefixes partial writes, mixing lines
        ranks = tempfile.mkdtemp(prefix="mpich-ranks-")
        cmd = ["mpiexec", "-n", str(n), "-errfile-pattern", f"{ranks}/%r",
               "-outfile-pattern", f"{ranks}/%r.out"] + main
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        out = subprocess.run(cmd, cwd=root / "test", stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=timeout,
                             env=env).stdout
        crashed = None
    except subprocess.TimeoutExpired as e:
        out = e.stdout or ""
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        crashed = "timeout"
    if impl != "gloocy":
        out = "\n".join(f"[{r}] {line}" for r in range(n)
                        for line in _read(Path(ranks, str(r))).splitlines())
        shutil.rmtree(ranks, ignore_errors=True)
    seen = defaultdict(dict)          # test id -> rank -> status
    for line in out.splitlines():
        m = RESULT.match(line)
        if m:
            seen[m.group(3)][int(m.group(1) or 0)] = m.group(4)
    tests = {t: len(ranks) == n and all(s == "ok" for s in ranks.values())
             for t, ranks in seen.items()}
    skipped = sorted(t for t, ranks in seen.items()
                     if any(s == "skipped" for s in ranks.values()))
    # the worst a rank reported ("missing": some rank reported nothing)
    worst = {t: max(list(ranks.values()) + (["missing"] if len(ranks) < n else []),
                    key=SEVERITY.index)
             for t, ranks in seen.items()}
    return {"tests": tests, "skipped": skipped, "worst": worst, "crashed": crashed,
            "tail": out.splitlines()[-15:] if not tests or crashed else []}


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*")
    parser.add_argument("-n", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--cache", type=Path,
                        default=Path.home() / ".cache" / "gloocy-mpi4py-suite")
    parser.add_argument("--out", type=Path, default=Path("mpi4py-suite"))
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--markdown", type=Path,
                        help="also write the per-file table (markdown) there")
    parser.add_argument("--fresh", action="store_true",
                        help="run MPICH again instead of reusing its results")
    args = parser.parse_args(argv)
    root = sdist(args.cache)
    shim_dir = shim(args.cache, root)
    files = args.files or sorted(p.stem for p in (root / "test").glob("test_*.py"))
    args.out.mkdir(parents=True, exist_ok=True)
    reference_file = args.out / "mpich.json"
    reference = json.loads(reference_file.read_text()) if reference_file.exists() else {}
    results = {}
    total_ref = total_both = 0
    print(f"{'file':24s} {'N':>2s} {'MPICH':>6s} {'gloocy':>6s} {'both':>6s}  notes")
    for name in files:
        for n in args.n:
            key = f"{name}@{n}"
            if args.fresh or key not in reference:
                reference[key] = run("mpich", name, n, root, shim_dir, args.timeout)
                reference_file.write_text(json.dumps(reference, indent=1))
            ours = run("gloocy", name, n, root, shim_dir, args.timeout)
            results[key] = ours
            ref_pass = {t for t, ok in reference[key]["tests"].items() if ok}
            our_pass = {t for t, ok in ours["tests"].items() if ok}
            both = len(ref_pass & our_pass)
            total_ref += len(ref_pass)
            total_both += both
            notes = ours["crashed"] or ("no test ran" if not ours["tests"] else "")
            print(f"{name:24s} {n:2d} {len(ref_pass):6d} {len(our_pass):6d} "
                  f"{both:6d}  {notes}", flush=True)
            (args.out / "gloocy.json").write_text(json.dumps(results, indent=1))
    share = 100.0 * total_both / total_ref if total_ref else 0.0
    print(f"gloocy passes {total_both} of the {total_ref} test runs MPICH passes "
          f"({share:.1f}%)")
    if args.markdown:
        args.markdown.write_text(table(files, args.n, reference, results))


def table(files, ns, reference, results):
    """A markdown table per file, summed over the world sizes: runs gloocy
    and MPICH pass, MPICH-passed runs gloocy fails / errors / skips."""
    head = ("| file | gloocy passed | MPICH passed | both | failed | errors | "
            "skipped (MPICH ran) | other | notes |\n|---|---|---|---|---|---|---|---|---|\n")
    rows, totals = [], [0] * 7
    for name in files:
        cells, notes = [0] * 7, []
        for n in ns:
            key = f"{name}@{n}"
            ref, ours = reference[key], results[key]
            ref_pass = {t for t, ok in ref["tests"].items() if ok}
            our_pass = {t for t, ok in ours["tests"].items() if ok}
            worst = ours.get("worst", {})
            missed = ref_pass - our_pass
            kinds = [worst.get(t, "missing") for t in missed]
            counts = [len(our_pass), len(ref_pass), len(ref_pass & our_pass),
                      kinds.count("FAIL"), kinds.count("ERROR"),
                      kinds.count("skipped")]
            counts.append(len(missed) - sum(counts[3:6]))
            cells = [a + b for a, b in zip(cells, counts)]
            if ours["crashed"]:
                notes.append(f"N={n}: {ours['crashed']}")
            if not ours["tests"]:
                notes.append(f"N={n}: no test ran")
        totals = [a + b for a, b in zip(totals, cells)]
        rows.append(f"| {name} | " + " | ".join(map(str, cells))
                    + f" | {'; '.join(notes)} |")
    share = 100.0 * totals[2] / totals[1] if totals[1] else 0.0
    rows.append("| **total** | " + " | ".join(f"**{c}**" for c in totals)
                + f" | **{share:.1f}%** of MPICH's passes |")
    return head + "\n".join(rows) + "\n"


if __name__ == "__main__":
    main()
