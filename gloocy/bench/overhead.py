"""gloocy-bench --overhead: what one call of the Python face costs,
``gloocy.MPI`` against mpi4py on MPICH, in a world of one.

    gloocy-bench --overhead [--calls 20000] [--rounds 5] [--out DIR] [--quiet]
    python bench/overhead.py [...]                      (the same)

Both sides run the same statements: ``CALLS`` below is written once and
executed against ``MPI`` from ``gloocy`` or from ``mpi4py``. Each round
starts one plain ``python`` process per implementation (no launcher, so
the world is that process alone), in alternating order (gloocy first in
even rounds, mpi4py first in odd ones). For every call a process

1. checks it once: ``want`` (NumPy or plain Python, no MPI) is evaluated
   after the setup, the statement runs once, ``got`` must equal ``want``;
   the parent also compares ``got`` across the implementations;
2. times it with ``timeit`` (setup, then the statement ``--calls`` times in
   a loop, garbage collector off) after a warm-up of a tenth as many calls.

A call's figure is the median over rounds of µs per call; the ratio is
gloocy's time over mpi4py's (< 1: gloocy is faster). A call that raises
is reported as an error in its row and the others go on; a process that
crashes or hangs loses only the call it was in (a new process takes the
rest). A process that cannot even import its ``MPI`` is tried again a few
times (gloocy's extension may be being rebuilt).

Writes DIR/overhead.json (every round's figure, the checks, the machine,
the versions and gloocy's git commit) and DIR/overhead.md, and prints the
table. ``--replot`` rebuilds overhead.md from overhead.json.

This file is also the worker (``python overhead.py --worker IMPL``): run as
a script, it imports only the standard library, NumPy and the one ``MPI``
it measures, so the mpi4py process never loads gloocy.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Call", "CALLS", "IMPLEMENTATIONS", "main", "markdown"]

IMPLEMENTATIONS = ("gloocy", "mpi4py")
DEFAULT_CALLS = 20_000
DEFAULT_ROUNDS = 5
START_TRIES = 4             # a worker that cannot import its MPI: tries
START_PAUSE = 3.0           # seconds between them
QUIET_LIMIT = 30.0          # seconds a worker may stay silent, plus 2 ms a call
PRELUDE = "comm = MPI.COMM_WORLD\n"


@dataclass(frozen=True)
class Call:
    """One row: ``stmt`` is timed after ``setup``; ``want`` (no MPI) is
    evaluated after the setup, ``got`` after one run of ``stmt``."""

    name: str
    setup: str
    stmt: str
    got: str
    want: str


_AB = "a = np.array([1.5], np.float32); b = np.zeros(1, np.float32)"
_BLOCKS = ("a = np.array([1.5, 2.5], np.float32); s = np.array([1.0, 2.0], np.float32); "
           "r = np.zeros(2, np.float32); g = np.zeros(2, np.float32); counts = [2]")

# In a world of one every root, destination and source is rank 0.
CALLS: tuple[Call, ...] = (
    Call("`Allreduce(a, b)`, 4 B", _AB, "comm.Allreduce(a, b)", "b.tolist()", "a.tolist()"),
    Call("`Allreduce(IN_PLACE, a)`", "a = np.array([1.5], np.float32)",
         "comm.Allreduce(MPI.IN_PLACE, a)", "a.tolist()", "[1.5]"),
    Call("`Allreduce([a, MPI.FLOAT], [b, MPI.FLOAT])`", _AB,
         "comm.Allreduce([a, MPI.FLOAT], [b, MPI.FLOAT])", "b.tolist()", "a.tolist()"),
    Call("`Allreduce([a, 1, MPI.FLOAT], [b, 1, MPI.FLOAT])`", _AB,
         "comm.Allreduce([a, 1, MPI.FLOAT], [b, 1, MPI.FLOAT])", "b.tolist()", "a.tolist()"),
    Call("`Reduce(a, b)`", _AB, "comm.Reduce(a, b)", "b.tolist()", "a.tolist()"),
    Call("`Bcast(x)`, 8 KiB", "x = np.arange(2048, dtype=np.float32)", "comm.Bcast(x)",
         "x.tolist()", "list(range(2048))"),
    Call("`Barrier()`", "", "comm.Barrier()", "comm.Barrier()", "None"),
    Call("`Scatter(s, r)`, 8 B", _BLOCKS, "comm.Scatter(s, r)", "r.tolist()", "s.tolist()"),
    Call("`Gather(a, g)`, 8 B", _BLOCKS, "comm.Gather(a, g)", "g.tolist()", "a.tolist()"),
    Call("`Allgather(a, g)`, 8 B", _BLOCKS, "comm.Allgather(a, g)", "g.tolist()", "a.tolist()"),
    Call("`Alltoall(s, r)`, 8 B", _BLOCKS, "comm.Alltoall(s, r)", "r.tolist()", "s.tolist()"),
    Call("`Allgatherv(a, [g, counts])`", _BLOCKS, "comm.Allgatherv(a, [g, counts])",
         "g.tolist()", "a.tolist()"),
    Call("`Alltoallv([s, counts], [r, counts])`", _BLOCKS,
         "comm.Alltoallv([s, counts], [r, counts])", "r.tolist()", "s.tolist()"),
    Call("`Scatterv([s, counts], r)`", _BLOCKS, "comm.Scatterv([s, counts], r)",
         "r.tolist()", "s.tolist()"),
    Call("`Gatherv(a, [g, counts])`", _BLOCKS, "comm.Gatherv(a, [g, counts])",
         "g.tolist()", "a.tolist()"),
    Call("`Sendrecv(a, 0, recvbuf=b, source=0)`", _AB,
         "comm.Sendrecv(a, 0, recvbuf=b, source=0)", "b.tolist()", "a.tolist()"),
    Call("`Isend(a, 0)` + `Irecv(b, 0)` + `Waitall`", _AB,
         "MPI.Request.Waitall([comm.Isend(a, 0), comm.Irecv(b, 0)])",
         "b.tolist()", "a.tolist()"),
    Call("`allreduce(1)`", "", "x = comm.allreduce(1)", "x", "1"),
    Call('`bcast({"a": 1})`', 'd = {"a": 1}', "x = comm.bcast(d)", "x", '{"a": 1}'),
    Call("`allgather(1)`", "", "x = comm.allgather(1)", "x", "[1]"),
    Call("`gather(1)`", "", "x = comm.gather(1)", "x", "[1]"),
    Call("`sendrecv(1, 0, source=0)`", "", "x = comm.sendrecv(1, 0, source=0)", "x", "1"),
    Call("`isend(1, 0)` + `recv(source=0)` + `wait()`", "",
         "q = comm.isend(1, 0); x = comm.recv(source=0); q.wait()", "x", "1"),
    Call("`Get_rank()`", "", "comm.Get_rank()", "comm.Get_rank()", "0"),
    Call("`Get_size()`", "", "comm.Get_size()", "comm.Get_size()", "1"),
    Call("`comm.Dup()` + `Free()`", "", "d = comm.Dup(); d.Free()",
         "d == MPI.COMM_NULL", "True"),
)

# What would make a worker join a bigger world instead of being one alone.
_LAUNCH_VARS = ("GLOOCY_RANK", "GLOOCY_SIZE", "GLOOCY_STORE", "GLOOCY_JOB_ID",
                "GLOOCY_LAUNCHER", "GLOOCY_LOCAL_", "GLOOCY_NODE_RANK",
                "GLOOCY_NNODES", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_",
                "SLURM_", "PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPI_LOCAL")


# --------------------------------------------------------------- the worker

def _short(value, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _error(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def _check(MPI, np, call: Call) -> dict:
    """Run the call once: got against want (raises what the call raises)."""
    ns = {"MPI": MPI, "np": np}
    exec(PRELUDE + call.setup, ns)
    want = eval(call.want, ns)
    exec(call.stmt, ns)
    got = eval(call.got, ns)
    return dict(ok=bool(got == want), got=_short(got), want=_short(want),
                digest=hashlib.sha1(repr(got).encode()).hexdigest()[:16])


def _time(MPI, np, call: Call, calls: int) -> float:
    """µs per call: the statement `calls` times in timeit's loop."""
    timer = timeit.Timer(call.stmt, setup=PRELUDE + call.setup,
                         globals={"MPI": MPI, "np": np})
    timer.timeit(max(1, calls // 10))                # warm-up
    return timer.timeit(calls) / calls * 1e6


def _versions(impl: str, MPI) -> dict:
    import numpy as np
    out = dict(python=platform.python_version(), numpy=np.__version__)
    if impl == "gloocy":
        import gloocy
        from gloocy import _core
        with open(_core.__file__, "rb") as f:
            extension = hashlib.sha1(f.read()).hexdigest()[:12]
        out.update(version=gloocy.__version__, extension=extension)
    else:
        import mpi4py
        out.update(version=mpi4py.__version__,
                   library=" ".join(MPI.Get_library_version().splitlines()[0].split()))
    return out


def _worker(impl: str, calls: int, indices: list[int], out: str) -> int:
    with open(out, "a") as f:
        def say(**row) -> None:
            f.write(json.dumps(row) + "\n")
            f.flush()

        try:
            import numpy as np
            if impl == "gloocy":
                from gloocy import MPI
            else:
                from mpi4py import MPI
            size = MPI.COMM_WORLD.Get_size()
            if size != 1:
                raise RuntimeError(f"the world has {size} processes, not one "
                                   "(run without a launcher)")
            header = _versions(impl, MPI)
        except Exception as e:      # e.g. the extension is being rebuilt
            print(f"overhead worker {impl}: cannot start: {_error(e)}", file=sys.stderr)
            return 3
        loop = timeit.Timer("pass").timeit(calls) / calls * 1e6
        say(impl=impl, loop_us=loop, **header)
        for i in indices:
            call = CALLS[i]
            say(start=i)
            row: dict = dict(index=i, us=None, error=None, check=None)
            try:
                row["check"] = _check(MPI, np, call)
                row["us"] = _time(MPI, np, call, calls)
            except Exception as e:
                row["error"] = _error(e)
            say(**row)
    return 0


# --------------------------------------------------------------- the parent

def _say(message: str) -> None:
    print(f"gloocy-bench: {message}", file=sys.stderr, flush=True)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCH_VARS)}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _read(path: str) -> list[dict]:
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.endswith("\n")]
    except FileNotFoundError:
        return []


def _process(impl: str, calls: int, indices: list[int]) -> tuple[dict | None, dict, str]:
    """One worker over `indices`: (its header, index -> row, why it stopped
    early or "")."""
    from gloocy.bench.runner import _stop

    limit = QUIET_LIMIT + calls * 0.002
    with tempfile.TemporaryDirectory(prefix="gloocy-overhead-") as tmp:
        out, log = os.path.join(tmp, "rows.jsonl"), os.path.join(tmp, "log")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", impl,
               "--calls", str(calls), "--only", ",".join(map(str, indices)),
               "--rows", out]
        with open(log, "wb") as logf:
            proc = subprocess.Popen(cmd, env=_env(), stdin=subprocess.DEVNULL,
                                    stdout=logf, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            seen, last = 0, time.monotonic()
            try:
                while True:
                    try:
                        rc = proc.wait(0.1)
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    now = len(_read(out))
                    if now != seen:
                        seen, last = now, time.monotonic()
                    elif time.monotonic() - last > limit:
                        _stop(proc)
                        rc = None
                        break
            except BaseException:       # Ctrl-C: leave nothing running
                _stop(proc)
                raise
        rows = _read(out)
        with open(log, errors="replace") as f:
            tail = " | ".join(x.strip() for x in f.readlines()[-3:] if x.strip())
    header = rows[0] if rows and "impl" in rows[0] else None
    done = {r["index"]: r for r in rows if "index" in r}
    why = ""
    if rc is None:
        why = f"hung: no progress for {limit:g} s"
    elif rc != 0 or len(done) < len(indices):
        why = f"exited with code {rc}" + (f": {tail}" if tail else "")
    return header, done, why


def _run(impl: str, calls: int) -> tuple[dict | None, dict]:
    """Every call in worker processes: (header, index -> row). A process
    that dies in a call loses that call (an error row); a new one takes the
    rest. A process that dies before its first call is tried again."""
    pending, rows, header, tries = list(range(len(CALLS))), {}, None, 0
    while pending:
        head, done, why = _process(impl, calls, pending)
        header = header or head
        rows.update(done)
        pending = [i for i in pending if i not in done]
        if not pending:
            break
        if head is None:
            tries += 1
            if tries < START_TRIES:
                _say(f"{impl} did not start ({why}); trying again")
                time.sleep(START_PAUSE)
                continue
            for i in pending:
                rows[i] = dict(index=i, us=None, check=None,
                               error=f"the {impl} process did not start: {why}")
            break
        # Workers run their calls in order, each reported before the next:
        # the one a dead worker was in is the first still pending.
        lost = pending[0]
        rows[lost] = dict(index=lost, us=None, check=None, error=f"process {why}")
        pending.remove(lost)
    return header, rows


def _git(root: Path) -> dict:
    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                               text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return r.stdout.rstrip("\n") if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    dirty = sorted(line[3:] for line in (status or "").splitlines() if line[3:])
    return dict(commit=commit, uncommitted=dirty)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _summary(impl: str, per_round: list[dict]) -> dict:
    """One call, one implementation, over the rounds that ran it."""
    us = [r["us"] for r in per_round if r.get("us") is not None]
    errors = sorted({r["error"] for r in per_round if r.get("error")})
    checks = [r["check"] for r in per_round if r.get("check")]
    wrong = sorted({f"got {c['got']}, want {c['want']}" for c in checks if not c["ok"]})
    return dict(us=us, median_us=statistics.median(us) if us else None,
                errors=errors, wrong=wrong,
                digests=sorted({c["digest"] for c in checks}),
                got=checks[0]["got"] if checks else None)


def _measure(args: argparse.Namespace, argv: list[str]) -> dict:
    import gloocy
    from gloocy.bench.impls import _no_module
    from gloocy.bench.progress import Progress

    start = time.monotonic()
    root = Path(gloocy.__file__).resolve().parent.parent
    git = _git(root)
    meta = dict(
        command=" ".join(["gloocy-bench", "--overhead", *argv]),
        date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        host=platform.node(), cpus=len(os.sched_getaffinity(0)),
        cpu_model=_cpu_model(), platform=platform.platform(),
        load_average=[round(x, 2) for x in os.getloadavg()], nice=os.nice(0),
        world_size=1, calls=args.calls, warmup_calls=max(1, args.calls // 10),
        rounds=args.rounds, order=[], implementations={}, loop_us={})
    missing = {"gloocy": None, "mpi4py": _no_module("mpi4py")}
    impls = [x for x in IMPLEMENTATIONS if missing[x] is None]
    for x in IMPLEMENTATIONS:
        meta["implementations"][x] = dict(missing=missing[x])
        if missing[x]:
            _say(f"missing: {x}: {missing[x]}")
    meta["implementations"]["gloocy"].update(git)
    raw: dict[str, list[dict]] = {x: [] for x in impls}
    progress = Progress(args.rounds * len(impls), args.quiet)
    try:
        for r in range(args.rounds):
            order = impls if r % 2 == 0 else impls[::-1]
            meta["order"].append(list(order))
            for impl in order:
                progress.status(f"{impl}, round {r + 1}")
                header, rows = _run(impl, args.calls)
                raw[impl].append(rows)
                info = meta["implementations"][impl]
                if header:
                    meta["loop_us"].setdefault(impl, []).append(header["loop_us"])
                    for key in ("version", "library", "python", "numpy"):
                        if key in header:
                            info[key] = header[key]
                    if "extension" in header:
                        info.setdefault("extension", [])
                        if header["extension"] not in info["extension"]:
                            info["extension"].append(header["extension"])
                progress.step()
    finally:
        progress.close()
    end = _git(root)
    if end["commit"] != git["commit"]:
        meta["implementations"]["gloocy"]["commit_at_end"] = end["commit"]
    results = []
    for i, call in enumerate(CALLS):
        row = dict(call=call.name, setup=call.setup, stmt=call.stmt,
                   got=call.got, want=call.want)
        for impl in impls:
            row[impl] = _summary(impl, [rounds[i] for rounds in raw[impl] if i in rounds])
        results.append(row)
    meta["results"] = results
    meta["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    meta["seconds"] = round(time.monotonic() - start, 1)
    return meta


def _micro(us: float) -> str:
    return f"{us:#.3g}".rstrip(".") if us < 100 else f"{us:.0f}"


def _cell(s: dict | None, missing: str | None) -> str:
    if missing:
        return "missing"
    if s is None:
        return "—"
    if s["median_us"] is None:
        return "**error**" if s["errors"] else "—"
    text = _micro(s["median_us"])
    if len(s["us"]) > 1:
        text += f" [{_micro(min(s['us']))}–{_micro(max(s['us']))}]"
    if s["errors"]:
        text += " (**error** in some rounds)"
    return f"**WRONG RESULT** {text}" if s["wrong"] else text


def _ratio_of(row: dict) -> float | None:
    g, m = row.get("gloocy"), row.get("mpi4py")
    if not g or not m or g["median_us"] is None or not m["median_us"]:
        return None
    return g["median_us"] / m["median_us"]


def _differ(row: dict) -> bool:
    g, m = row.get("gloocy"), row.get("mpi4py")
    return bool(g and m and g["digests"] and m["digests"]
                and g["digests"] != m["digests"])


def markdown(meta: dict) -> str:
    """overhead.md: the table, how it was measured, what went wrong."""
    from gloocy.bench.report import _ratio

    info = meta["implementations"]
    miss = {x: info[x]["missing"] for x in IMPLEMENTATIONS}
    lines = ["### Per-call overhead, world of one", "",
             "| call | gloocy µs | mpi4py µs | ratio (gloocy/mpi4py) |",
             "|---|---:|---:|---:|"]
    notes: list[str] = []
    errors: dict[tuple[str, str], list[str]] = {}
    for row in meta["results"]:
        ratio = _ratio_of(row)
        cells = [row["call"], _cell(row.get("gloocy"), miss["gloocy"]),
                 _cell(row.get("mpi4py"), miss["mpi4py"]),
                 f"{_ratio(ratio)}×" if ratio is not None else "n/a"]
        if _differ(row):
            cells[3] += " (**results differ**)"
            notes.append(f"- **results differ: {row['call']}**: gloocy got "
                         f"{row['gloocy']['got']}, mpi4py got {row['mpi4py']['got']}")
        lines.append("| " + " | ".join(cells) + " |")
        for impl in IMPLEMENTATIONS:
            s = row.get(impl) or {}
            for e in s.get("errors", []):
                errors.setdefault((impl, e), []).append(row["call"])
            for w in s.get("wrong", []):
                notes.append(f"- **WRONG RESULT: {impl}, {row['call']}**: {w}")
    for (impl, e), calls in errors.items():        # one line per distinct error
        which = ("every call" if len(calls) == len(meta["results"])
                 else ", ".join(calls))
        notes.append(f"- **error: {impl}, {which}**: {e}")
    g = info["gloocy"]
    commit = (g.get("commit") or "unknown")[:12]
    dirty = g.get("uncommitted") or []
    loop = {x: statistics.median(v) for x, v in meta.get("loop_us", {}).items() if v}
    lines += [
        "",
        f"µs per call: the median over {meta['rounds']} round(s) [min–max over "
        f"rounds] of {meta['calls']:,} calls in a loop (after {meta['warmup_calls']:,} warm-up calls), each "
        "implementation in its own plain `python` process (a world of one, no "
        "launcher), the two interleaved in alternating order. Both run the same "
        "statements (`gloocy/bench/overhead.py`, `CALLS`), checked once per round "
        "before timing. Ratio: gloocy's time / mpi4py's (< 1: gloocy is faster). "
        "The loop itself costs "
        + (", ".join(f"{_micro(v)} µs ({x})" for x, v in loop.items()) or "—")
        + " per call, not subtracted.",
        "",
        f"`{meta['command']}` on {meta['host']} ({meta['cpu_model']}, "
        f"{meta['cpus']} CPUs, {meta['platform']}), {meta['date']}; load average "
        f"{meta['load_average'][0]} at the start, {meta['load_average_at_end'][0]} "
        f"at the end ({meta['seconds']:g} s)"
        + (f", run at nice {meta['nice']}" if meta.get("nice") else "") + ".",
        "",
        f"- gloocy {g.get('version', '?')} at commit {commit}"
        + (f" with uncommitted changes to {', '.join(dirty)}" if dirty else "")
        + (f" (the commit was {g['commit_at_end'][:12]} by the end)"
           if g.get("commit_at_end") else "")
        + (f"; extension {', '.join(g.get('extension', []))}"
           + (" (**it changed during the run**)" if len(g.get("extension", [])) > 1 else "")
           if g.get("extension") else ""),
    ]
    m = info["mpi4py"]
    lines.append(f"- **missing: mpi4py** — {m['missing']}" if m["missing"] else
                 f"- mpi4py {m.get('version', '?')}, {m.get('library', '?')}")
    py = g.get("python") or m.get("python")
    if py:
        lines.append(f"- Python {py}, NumPy {g.get('numpy') or m.get('numpy')}")
    if meta.get("note"):                    # added by hand to overhead.json
        lines.append(f"- {meta['note']}")
    lines += notes
    return "\n".join(lines) + "\n"


def _failed(meta: dict) -> bool:
    return any(s and (s["errors"] or s["wrong"] or s["median_us"] is None)
               for row in meta["results"]
               for x in IMPLEMENTATIONS
               if not meta["implementations"][x]["missing"]
               for s in [row.get(x)]) or any(_differ(r) for r in meta["results"])


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gloocy-bench --overhead", allow_abbrev=False,
        description="The per-call cost of gloocy.MPI against mpi4py on MPICH, "
                    "in a world of one (plain python processes, interleaved).")
    p.add_argument("--calls", type=int, default=DEFAULT_CALLS,
                   help=f"timed calls per call and round (default: {DEFAULT_CALLS})")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                   help=f"processes per implementation, interleaved "
                        f"(default: {DEFAULT_ROUNDS})")
    p.add_argument("--out", default="gloocy-bench-out", metavar="DIR",
                   help="output directory (default: ./gloocy-bench-out); "
                        "writes overhead.json and overhead.md")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--replot", action="store_true",
                   help="only rebuild overhead.md from DIR/overhead.json")
    return p


def main(argv: list[str] | None = None) -> int:
    """gloocy-bench --overhead (argv without the flag)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        _parser().error("--calls and --rounds must be at least 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        meta = json.loads((out / "overhead.json").read_text())
    else:
        meta = _measure(args, argv)
        (out / "overhead.json").write_text(json.dumps(meta, indent=1) + "\n")
    text = markdown(meta)
    (out / "overhead.md").write_text(text)
    print(text)
    if not args.quiet:
        _say(f"wrote {out / 'overhead.json'}, {out / 'overhead.md'}")
    return 1 if _failed(meta) else 0


def _worker_main() -> int:
    p = argparse.ArgumentParser(prog="overhead.py --worker")
    p.add_argument("--worker", required=True, choices=IMPLEMENTATIONS)
    p.add_argument("--calls", type=int, required=True)
    p.add_argument("--only", required=True, help="indices into CALLS, comma-separated")
    p.add_argument("--rows", required=True, help="JSON Lines file to append to")
    a = p.parse_args()
    return _worker(a.worker, a.calls, [int(i) for i in a.only.split(",")], a.rows)


if __name__ == "__main__":
    # As a script this is the worker: drop this folder from the path so that
    # nothing here shadows a module, and import nothing of gloocy's but MPI.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    sys.exit(_worker_main() if "--worker" in sys.argv else main())
