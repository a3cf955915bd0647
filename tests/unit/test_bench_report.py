"""gloocy-bench's report on rows made by hand: no rank, no run (the bench
end to end is tests/system/test_bench.py)."""

from gloocy.bench import report


def test_report_marks_wrong_results_and_ratios(tmp_path):
    def row(label, t, verified=True, collective="allreduce", size=1 << 20):
        return dict(label=label, collective=collective, world_size=2, size=size,
                    bytes=size, median_s=t, verified=verified)
    rows = [row("gloocy:tcp", 1e-3), row("gloocy:tcp", 3e-3),
            row("torch-gloo", 4e-3), row("mpi4py", 1e-3, verified=False),
            row("torch-gloo", 1e-3, collective="allgather")]
    meta = dict(rounds=2, world_sizes=[2], collectives=["allreduce", "allgather"],
                sizes=[1 << 20],
                impls=[dict(label="gloocy:tcp", missing=None, collectives=["allreduce"]),
                       dict(label="torch-gloo", missing=None,
                            collectives=["allreduce", "allgather"]),
                       dict(label="mpi4py", missing=None,
                            collectives=["allreduce", "allgather"])])
    text, files = report.write(tmp_path, rows, meta)
    allreduce, allgather = text.split("### allgather")
    # gloocy: median of 1 and 3 ms = 2 ms, spread 1-3 ms; torch 4 ms -> 2.00
    line = next(x for x in allreduce.splitlines() if x.startswith("| 1 MiB"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1] == "2000 [1000–3000]"
    assert cells[2] == "0.524"         # 2(n-1)/n = 1 at n = 2: 1 MiB / 2 ms
    assert cells[-2:] == ["2.00", "0.50"]
    assert "**WRONG RESULT**" in cells[5]
    assert "**WRONG RESULT: mpi4py, N = 2, 1 MiB**" in allreduce
    assert "| 1 MiB | n/a | n/a |" in allgather
    assert "gloocy:tcp has no allgather yet" in allgather
