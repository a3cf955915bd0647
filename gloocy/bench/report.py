"""Markdown tables and PNG plots from the raw JSON lines.

Across rounds, a point's figure is the median of the runs' figures (each
the slowest rank's median) and its spread the min–max of them; bus
bandwidth is computed from that median. Ratios are speed ratios from
those medians: peer time / gloocy time, so > 1 means gloocy is faster.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from gloocy.bench.collectives import (BUSBW_FORMULA, BYTES_MEANING, COLLECTIVES,
                                      busbw_factor, case_bytes)

__all__ = ["Point", "load", "summarize", "table", "plot", "write",
           "format_bytes"]

COLORS = {"gloocy:tcp": "tab:blue", "gloocy:shm": "tab:purple",
          "torch-gloo": "tab:orange", "mpi4py": "tab:green",
          "mpi4py-yield": "tab:olive"}
STYLES = ("-", "--", ":", "-.")


@dataclass
class Point:
    """One (collective, world size, implementation, size) over all rounds."""

    nbytes: int
    median_s: float             # median over rounds of the runs' figures
    low_s: float                # min over rounds
    high_s: float               # max over rounds
    busbw_GBps: float | None
    verified: bool              # every round's check passed
    rounds: int


def load(path: str | Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def summarize(rows: list[dict]) -> dict[tuple[str, int, str, int], Point]:
    """Key (collective, world_size, label, size) -> Point."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        key = (r["collective"], r["world_size"], r["label"], r["size"])
        groups.setdefault(key, []).append(r)
    out = {}
    for (coll, n, label, size), rs in groups.items():
        times = [r["median_s"] for r in rs]
        median = statistics.median(times)
        factor = busbw_factor(coll, n)
        nbytes = rs[0]["bytes"]
        out[coll, n, label, size] = Point(
            nbytes, median, min(times), max(times),
            nbytes * factor / median / 1e9 if factor is not None else None,
            all(r["verified"] for r in rs), len(rs))
    return out


def format_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _us(seconds: float) -> str:
    us = seconds * 1e6
    return f"{us:.2f}" if us < 10 else f"{us:.1f}" if us < 100 else f"{us:.0f}"


def _gbps(x: float) -> str:
    return "<0.001" if x < 0.001 else f"{x:.3f}" if x < 1 else f"{x:.2f}"


def _ratio(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def _ratio_name(g: str, gloocys: list[str]) -> str:
    return "gloocy" if len(gloocys) == 1 else g


def table(collective: str, n: int, points: dict, labels: list[str],
          unsupported: set[str], sizes: list[int]) -> str:
    """One markdown table: rows = sizes, columns = implementations + ratios."""
    gloocys = [x for x in labels if x.startswith("gloocy")]
    peers = [x for x in labels if not x.startswith("gloocy")]
    barrier = collective == "barrier"
    sizes = sorted({0} if barrier else {*sizes, *(
        k[3] for k in points if k[0] == collective and k[1] == n)})
    head = ["bytes" if not barrier else ""]
    for x in labels:
        head += [f"{x} µs"] + ([] if barrier else [f"{x} GB/s"])
    head += [f"{_ratio_name(g, gloocys)}/{p}" for g in gloocys for p in peers]
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join(["---:"] * len(head)) + "|"]
    rounded = False
    for size in sizes:
        got = {x: points.get((collective, n, x, size)) for x in labels}
        nbytes = next((p.nbytes for p in got.values() if p),
                      case_bytes(collective, size, n))
        rounded |= nbytes != size
        cells = ["barrier" if barrier else format_bytes(nbytes) + ("*" if nbytes != size else "")]
        for x in labels:
            p = got[x]
            if p is None:
                lat = bw = "n/a" if x in unsupported else "—"
            else:
                lat = _us(p.median_s)
                if p.rounds > 1:
                    lat += f" [{_us(p.low_s)}–{_us(p.high_s)}]"
                bw = _gbps(p.busbw_GBps) if p.busbw_GBps is not None else ""
                if not p.verified:
                    lat, bw = f"**WRONG RESULT** {lat}", f"**WRONG** {bw}"
            cells += [lat] + ([] if barrier else [bw])
        for g in gloocys:
            for peer in peers:
                a, b = got[g], got[peer]
                cells.append(_ratio(b.median_s / a.median_s) if a and b else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    if rounded:
        lines.append("\n\\* rounded to whole float32 blocks per rank (at least one element).")
    return "\n".join(lines)


def _caption(collective: str, rounds: int) -> str:
    text = ("Latency: the slowest rank's median per run" +
            (f"; median over {rounds} rounds [min–max over rounds]."
             if rounds > 1 else " (one round)."))
    if collective != "barrier":
        text = (f"bytes = {BYTES_MEANING[collective]}. {text} Bus bandwidth "
                f"(nccl-tests) = {BUSBW_FORMULA[collective]}.")
    return text + " Ratios: peer time / gloocy time (> 1: gloocy faster)."


def markdown(collective: str, points: dict, meta: dict) -> str:
    """The collective's section: a table per world size, notes below."""
    labels = [i["label"] for i in meta["impls"] if not i["missing"]]
    unsupported = {i["label"] for i in meta["impls"]
                   if collective not in i["collectives"]}
    out = [f"### {collective}", "", _caption(collective, meta["rounds"]), ""]
    for n in meta["world_sizes"]:
        out += [f"N = {n}:", "",
                table(collective, n, points, labels, unsupported, meta["sizes"]), ""]
    for i in meta["impls"]:
        if i["missing"]:
            out.append(f"- **missing: {i['label']}** — {i['missing']}")
        elif i["label"] in unsupported:
            out.append(f"- n/a: {i['label']} has no {collective} yet")
    wrong = sorted({(k[2], k[1], format_bytes(p.nbytes)) for k, p in points.items()
                    if k[0] == collective and not p.verified})
    for label, n, b in wrong:
        out.append(f"- **WRONG RESULT: {label}, N = {n}, {b}**")
    for f in meta.get("failures", []):
        if collective in f.get("collectives", ()):
            out.append(f"- failed job: {f['job']}: {f['why']}")
    return "\n".join(out).rstrip() + "\n"


def plot(collective: str, points: dict, meta: dict, path: Path) -> None:
    """Bus bandwidth and latency against size (log axes), one line per
    implementation and world size, a band for the spread over rounds."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator

    labels = [i["label"] for i in meta["impls"] if not i["missing"]]
    lines = [(x, n) for n in meta["world_sizes"] for x in labels
             if any(k[:3] == (collective, n, x) for k in points)]
    sub = (f"{meta.get('host', '')}, {meta.get('cpus', '?')} CPUs, "
           f"{meta.get('date', '')}; median of {meta['rounds']} round(s), "
           "band/bar = min–max over rounds")
    if not lines:
        fig, ax = plt.subplots(figsize=(7, 3))
        ax.axis("off")
        why = [f"{i['label']}: " + (i["missing"] or ("n/a" if collective not in
               i["collectives"] else "no data (failed)")) for i in meta["impls"]]
        ax.text(0.5, 0.5, f"{collective}: no data\n" + "\n".join(why),
                ha="center", va="center")
    elif collective == "barrier":
        fig, ax = plt.subplots(figsize=(7, 4.5))
        top = 1.0
        for i, (x, n) in enumerate(lines):
            p = points[collective, n, x, 0]
            us, hi = p.median_s * 1e6, p.high_s * 1e6
            ax.bar(i, us, color=COLORS.get(x, "grey"),
                   yerr=[[us - p.low_s * 1e6], [hi - us]], capsize=4)
            ax.text(i, hi * 1.15, f"{us:.3g} µs" + ("" if p.verified else " WRONG"),
                    ha="center", va="bottom", color="black" if p.verified else "red")
            top = max(top, hi * 3)
        ax.set_ylim(top=top)
        ax.set_xticks(range(len(lines)), [f"{x}\nN = {n}" for x, n in lines])
        ax.set_yscale("log")
        ax.set_ylabel("latency (µs)")
        ax.set_title(f"barrier\n{sub}", fontsize=9)
    else:
        fig, (bw, lat) = plt.subplots(1, 2, figsize=(13, 5))
        for x, n in lines:
            pts = sorted((k[3], p) for k, p in points.items() if k[:3] == (collective, n, x))
            b = [p.nbytes for _, p in pts]
            factor = busbw_factor(collective, n)
            style = dict(color=COLORS.get(x, None),
                         linestyle=STYLES[meta["world_sizes"].index(n) % len(STYLES)])
            name = f"{x}, N = {n}"
            lat.plot(b, [p.median_s * 1e6 for _, p in pts], marker="o", ms=3,
                     label=name, **style)
            lat.fill_between(b, [p.low_s * 1e6 for _, p in pts],
                             [p.high_s * 1e6 for _, p in pts], alpha=0.2, color=style["color"])
            bw.plot(b, [p.busbw_GBps for _, p in pts], marker="o", ms=3, label=name, **style)
            bw.fill_between(b, [nb * factor / p.high_s / 1e9 for nb, (_, p) in zip(b, pts)],
                            [nb * factor / p.low_s / 1e9 for nb, (_, p) in zip(b, pts)],
                            alpha=0.2, color=style["color"])
            bad = [(nb, p) for nb, (_, p) in zip(b, pts) if not p.verified]
            if bad:
                lat.plot([nb for nb, _ in bad], [p.median_s * 1e6 for _, p in bad], "rx",
                         ms=12, mew=3, label=f"{name}: WRONG RESULT")
        fmt = FuncFormatter(lambda v, _: format_bytes(int(v)) if v >= 1 else "")
        for ax, ylabel in ((bw, "bus bandwidth (GB/s)"), (lat, "latency (µs)")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_locator(LogLocator(base=4))
            ax.xaxis.set_major_formatter(fmt)
            ax.tick_params(axis="x", labelrotation=45)
            ax.set_xlabel(f"bytes: {BYTES_MEANING[collective]}", fontsize=8)
            ax.set_ylabel(ylabel)
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(fontsize=8)
        bw.set_title(f"{collective}: bus bandwidth (higher is better)")
        lat.set_title(f"{collective}: latency (lower is better)")
        fig.suptitle(sub, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(out_dir: str | Path, rows: list[dict], meta: dict) -> tuple[str, list[Path]]:
    """Write COLLECTIVE.md and COLLECTIVE.png per collective; return the
    markdown of them all and the files written."""
    out_dir = Path(out_dir)
    points = summarize(rows)
    try:
        import matplotlib  # noqa: F401
        can_plot = True
    except ImportError:
        can_plot = False
    texts, files = [], []
    for collective in COLLECTIVES:
        if collective not in meta["collectives"]:
            continue
        text = markdown(collective, points, meta)
        if not can_plot:
            text += "- no plot: matplotlib is not installed\n"
        md = out_dir / f"{collective}.md"
        md.write_text(text)
        texts.append(text)
        files.append(md)
        if can_plot:
            png = out_dir / f"{collective}.png"
            plot(collective, points, meta, png)
            files.append(png)
    return "\n".join(texts), files
