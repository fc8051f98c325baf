"""Heatmaps of GPU x GPU matrices (one panel per matrix), the picture users paste into issues."""

from __future__ import annotations

from pathlib import Path

from ncclprobe.evidence.node.matrix import Matrix


def write_heatmap(matrices: list[Matrix], path: str | Path, title: str) -> Path | None:
    """One PNG with a panel per square GPU matrix; None when there is none to draw."""
    square = [m for m in matrices if m.square and len(m.rows) > 1]
    if not square:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(square))
    rows = (len(square) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.8 * rows), squeeze=False)
    for ax, m in zip(axes.flat, square):
        grid = [
            [float("nan") if v is None or (i == j) else v for j, v in enumerate(row)]
            for i, row in enumerate(m.values)
        ]
        image = ax.imshow(grid, cmap="viridis" if m.metric == "bandwidth" else "magma_r")
        ax.set_title(m.label, fontsize=8)
        ax.set_xticks(range(len(m.cols)), m.cols, fontsize=6, rotation=90)
        ax.set_yticks(range(len(m.rows)), m.rows, fontsize=6)
        ax.set_xlabel("destination", fontsize=7)
        ax.set_ylabel("source", fontsize=7)
        fig.colorbar(image, ax=ax, label=m.unit, shrink=0.8)
    for ax in list(axes.flat)[len(square) :]:
        ax.axis("off")
    fig.suptitle(title + " (diagonal: same-GPU copies, not shown)", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial.png")
    try:
        fig.savefig(partial, dpi=110)
        partial.replace(path)
    finally:
        plt.close(fig)
        partial.unlink(missing_ok=True)
    return path
