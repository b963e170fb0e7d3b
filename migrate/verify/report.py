"""Render a verification verdict: a text table, a JSON file, and a PNG of both loss curves."""
from __future__ import annotations

import json
from typing import Optional


def _fmt(vals) -> str:
    if not vals:
        return "-"
    return ", ".join("%.6g" % v for v in vals)


def table(verdict: dict, max_rows: int = 40) -> str:
    """Per-step table (rank, step, losses, rel diff, skip, scale) with the first divergent step marked."""
    lines = ["%-4s %-4s %-28s %-28s %-10s %-9s %s" % ("rank", "step", "original loss", "migrated loss",
                                                     "rel diff", "skipped", "")]
    first = (verdict.get("first_divergent_rank"), verdict.get("first_divergent_step"))
    for row in verdict["rows"][:max_rows]:
        mark = "<-- first divergence" if (row["rank"], row["step"]) == first else ("" if row["ok"] else "x")
        lines.append("%-4d %-4d %-28s %-28s %-10.2e %-9s %s" % (
            row["rank"], row["step"], _fmt(row["original"])[:28], _fmt(row["migrated"])[:28], row["rel_diff"],
            "/".join("y" if s else "n" for s in row["skipped"]), mark))
    if len(verdict["rows"]) > max_rows:
        lines.append("... %d more rows in the JSON output" % (len(verdict["rows"]) - max_rows))
    return "\n".join(lines)


def write_json(verdict: dict, path: str) -> None:
    """Write the verdict (floats as JSON numbers, inf/NaN as strings)."""
    def clean(o):
        if isinstance(o, float) and (o != o or o in (float("inf"), float("-inf"))):
            return repr(o)
        if isinstance(o, dict):
            return {k: clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o
    with open(path, "w", encoding="utf-8") as f:
        json.dump(clean(verdict), f, indent=2)
        f.write("\n")


def plot(verdict: dict, path: str) -> Optional[str]:
    """Draw both loss curves (per rank) and the loss scale to a PNG; returns an error message if impossible."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: pip install matplotlib (or apex2amp[plot]) to get --plot"
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ranks = sorted({r["rank"] for r in verdict["rows"]})
    for rank in ranks:
        rows = [r for r in verdict["rows"] if r["rank"] == rank]
        steps = [r["step"] for r in rows]
        ax1.plot(steps, [sum(r["original"]) for r in rows], "o-", label="original rank %d" % rank)
        ax1.plot(steps, [sum(r["migrated"]) for r in rows], "x--", label="migrated rank %d" % rank)
        ax2.plot(steps, [r["scale"][0] or 0 for r in rows], "o-", label="original scale rank %d" % rank)
        ax2.plot(steps, [r["scale"][1] or 0 for r in rows], "x--", label="migrated scale rank %d" % rank)
    if verdict.get("first_divergent_step") is not None:
        ax1.axvline(verdict["first_divergent_step"], color="red", alpha=0.4)
    ax1.set_ylabel("loss (sum per step)")
    ax2.set_ylabel("loss scale")
    ax2.set_yscale("symlog")
    ax2.set_xlabel("optimizer step")
    ax1.legend(fontsize=7)
    ax1.set_title("apex2amp verify: %s" % ("PASS" if verdict["passed"] else "FAIL"))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None
