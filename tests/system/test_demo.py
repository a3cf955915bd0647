"""The main job of README's quick start runs and every check passes; and
the checks behind its "ok" lines fail when a result is wrong."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gloocy
from gloocy import demo


def test_demo_runs_and_checks_every_collective():
    out = subprocess.run(
        [sys.executable, "-m", "gloocy.run", "-n", "3", sys.executable, "-m",
         "gloocy.demo"], capture_output=True, timeout=180)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    lines = out.stdout.decode().splitlines()
    checks = [line for line in lines if line.startswith("[0] check ")]
    # every group of checks the demo runs reports "ok" (a failure would
    # have raised on some rank and failed the job above)
    assert len(checks) == 11 and all(line.endswith(" ok") for line in checks)
    assert any("Barrier" in line and " us" in line for line in lines)
    assert "transport shared memory (node collectives)" in lines[0]


# -- the demo's "ok" can fail ----------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_allreduce_closed_forms_match_numpy(n):
    # The demo's expected Allreduce results against NumPy folding every
    # rank's input; and no rank's input is already the answer (for n > 1),
    # so a call that did nothing could not pass.
    ufuncs = {op.name: ufunc for op, ufunc in [     # ops are unhashable, as mpi4py's
        (gloocy.SUM, np.add), (gloocy.PROD, np.multiply),
        (gloocy.MIN, np.minimum), (gloocy.MAX, np.maximum)]}
    for op in demo.OPS:
        for dtype in (np.float64, np.int32):
            for count in demo.COUNTS:
                ins = [demo.allreduce_input(op, r, n, count, dtype) for r in range(n)]
                folded = ufuncs[op.name].reduce([x for x, _ in ins])
                for x, want in ins:
                    assert np.array_equal(folded, np.broadcast_to(want, folded.shape))
                    assert n == 1 or not np.array_equal(x, folded), (op, dtype, count)


DRIVER = """
    import sys
    import numpy as np, gloocy
    from gloocy import demo
    comm = gloocy.init()
    r, n = comm.rank, comm.size
    if sys.argv[1] == "every rank":        # rank 1's input is off by one
        x, want = demo.allreduce_input(gloocy.SUM, r, n, 7, np.int32)
        if r == 1:
            x[3] += 1
        comm.Allreduce(gloocy.IN_PLACE, x)
        demo.check(comm, "Allreduce SUM", x, want)
    else:                                  # the root sends rank n-1 a wrong block
        every = np.repeat(np.arange(1, n + 1), 3)
        every[-1] = 99
        got = np.zeros(3, np.int64)
        comm.Scatter(every if r == 0 else None, got, root=0)
        demo.check(comm, "Scatter", got, np.full(3, r + 1))
    demo.passed(comm, "the group")
"""


@pytest.mark.parametrize("where", ["every rank", "one rank"])
def test_a_wrong_result_fails_the_job_and_prints_no_ok(tmp_path, where):
    # The demo's own check() and passed() on real results made wrong by
    # real data: the job fails, the wrong rank(s) and the check are named,
    # and rank 0 never says "ok" (not even when its own result was right).
    prog = tmp_path / "driver.py"
    prog.write_text(textwrap.dedent(DRIVER))
    out = subprocess.run(
        [sys.executable, "-m", "gloocy.run", "--timeout", "60", "-n", "3",
         sys.executable, str(prog), where], capture_output=True, timeout=90)
    stdout, stderr = out.stdout.decode(), out.stderr.decode()
    assert out.returncode != 0, stdout
    assert " ok" not in stdout, stdout
    wrong = [0, 1, 2] if where == "every rank" else [2]
    name = "Allreduce SUM" if where == "every rank" else "Scatter"
    for r in wrong:
        assert f"rank {r}: check {name!r} failed" in stderr, stderr[-3000:]
    if where == "one rank":
        assert "rank 0: check" not in stderr and "rank 1: check" not in stderr
