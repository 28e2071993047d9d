"""The benchmark plot: throughput ratio to plain decoding against batch size, one panel per workload."""

from __future__ import annotations

from pathlib import Path

from hsedit.drafting.chain import NO_DRAFTER
from hsedit.errors import UsageError


def plot_report(report, path: str | Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UsageError("--plot needs matplotlib (pip install matplotlib)") from exc
    workloads = list(report.workloads)
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.2 * len(workloads), 3.6), squeeze=False)
    for ax, workload in zip(axes[0], workloads):
        for method in report.methods:
            if method == NO_DRAFTER:
                continue
            points = [
                (b, report.ratio(cell, NO_DRAFTER))
                for b in report.batch_sizes
                if (cell := report.cell(workload, b, method)) is not None and not cell.skipped
            ]
            points = [(b, r) for b, r in points if r is not None]
            if points:
                ax.plot([b for b, _ in points], [r for _, r in points], marker="o", label=method)
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        distance = report.edit_distance.get(workload)
        ax.set_title(workload + (f" ({distance:.0%} edit distance)" if distance is not None else ""))
        ax.set_xscale("log", base=2)
        ax.set_xticks(report.batch_sizes, [str(b) for b in report.batch_sizes])
        ax.set_xlabel("batch size (concurrent requests)")
        ax.set_ylabel("output tok/s vs plain")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
