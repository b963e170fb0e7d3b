"""Render a verification verdict: a text table, a JSON file, and a PNG of both loss curves."""
from __future__ import annotations

import json
import math
from typing import List, Optional


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


def difference_summary(verdict: dict) -> str:
    """One honest line: the max relative loss difference and on which side losses went NaN/inf, from which step."""
    text = "max relative loss difference %.3g" % verdict.get("max_rel_diff", 0.0)
    first = verdict.get("first_nonfinite_step") or {}
    o, m = first.get("original"), first.get("migrated")
    if o is not None and m is None:
        text += "; NaN/inf loss from step %d in the original run only" % o
    elif m is not None and o is None:
        text += "; NaN/inf loss from step %d in the migrated run only" % m
    elif o is not None:
        text += "; NaN/inf losses in both runs (original from step %d, migrated from step %d)" % (o, m)
    return text


def _value(stats) -> str:
    if not stats:
        return "-"
    v = stats["absmax"]
    v = "%.3g" % v if isinstance(v, (int, float)) else str(v)
    fits = "fits fp16" if stats.get("fits_fp16") else ("fits bf16 only" if stats.get("fits_bf16") else "fits neither")
    return "%s (%s, %s)" % (v, stats.get("dtype", "?"), fits)


def nan_lines(verdict: dict) -> List[str]:
    """Where each side's first non-finite value appeared (the probe's NaN locator), as text lines."""
    out: List[str] = []
    origins = verdict.get("nan_origin") or {}
    for side in ("original", "migrated"):
        events = origins.get(side) or []
        if not events and verdict.get("find_nan"):
            out.append("verify: %s run: no NaN/inf value seen in any module (traced every step, --find-nan)" % side)
        for ev in events:
            scale = ev.get("loss_scale")
            head = "verify: %s run, rank %s step %s (loss scale %s): " % (
                side, ev.get("rank"), ev.get("step"), "%g" % scale if isinstance(scale, (int, float)) else "-")
            if ev.get("module") is None:
                out.append(head + "NaN/inf loss, but " + ev.get("detail", "no module produced it"))
                continue
            out.append(head + "first NaN/inf in the %s of `%s` (%s)" % (ev["direction"], ev["module"],
                                                                           ev.get("module_type", "?")))
            out.append("    abs-max: inputs %s; weights %s; outputs %s" % (
                _value(ev.get("inputs")), _value(ev.get("weights")), _value(ev.get("outputs"))))
            if ev.get("fp32_outputs"):
                out.append("    recomputed in fp32, the outputs reach %s" % _value(ev["fp32_outputs"]))
            if ev.get("gradient"):
                out.append("    gradient of its %s: %s" % (ev["gradient"].get("of"), _value(ev["gradient"])))
            if ev.get("detail"):
                out.append("    " + ev["detail"])
            out.append("    (traced %s)" % ev.get("trigger", "?"))
    return out


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def plot(verdict: dict, path: str) -> Optional[str]:
    """Draw both loss curves (per rank) and the loss scale (log2) to a PNG, marking NaN/inf and skipped steps;
    returns an error message if impossible."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, LogLocator
    except ImportError:
        return "matplotlib is not installed: pip install matplotlib (or apex2amp[plot]) to get --plot"
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ranks = sorted({r["rank"] for r in verdict["rows"]})
    bad, skipped, any_scale = [], [], False
    for rank in ranks:
        rows = [r for r in verdict["rows"] if r["rank"] == rank]
        steps = [r["step"] for r in rows]
        for i, (side, style) in enumerate((("original", "o-"), ("migrated", "x--"))):
            losses = [sum(r[side]) if r[side] else float("nan") for r in rows]
            ax1.plot(steps, [v if _finite(v) else float("nan") for v in losses], style,
                     label="%s rank %d" % (side, rank))
            bad.extend((s, side) for s, v in zip(steps, losses) if not _finite(v))
            scales = [r["scale"][i] if _finite(r["scale"][i]) and r["scale"][i] > 0 else float("nan")
                      for r in rows]
            any_scale = any_scale or any(_finite(v) for v in scales)
            ax2.plot(steps, scales, style, label="%s scale rank %d" % (side, rank))
            skipped.extend((s, side, v) for s, v, r in zip(steps, scales, rows) if r["skipped"][i])
    top = ax1.get_ylim()[1]
    for side, marker, color in (("original", "^", "red"), ("migrated", "v", "purple")):
        xs = [s for s, sd in bad if sd == side]
        if xs:
            ax1.scatter(xs, [top] * len(xs), marker=marker, color=color, zorder=5,
                        label="NaN/inf loss (%s)" % side)
        sk = [(s, v) for s, sd, v in skipped if sd == side]
        if sk:
            for s, _ in sk:
                ax1.axvspan(s - 0.4, s + 0.4, color=color, alpha=0.08)
            ax2.scatter([s for s, _ in sk], [v if _finite(v) else 1.0 for _, v in sk], marker="s",
                        facecolors="none", edgecolors=color, zorder=5, label="skipped step (%s)" % side)
    if verdict.get("first_divergent_step") is not None:
        ax1.axvline(verdict["first_divergent_step"], color="red", alpha=0.4)
    ax1.set_ylabel("loss (sum per step)")
    ax2.set_ylabel("loss scale")
    if any_scale:
        ax2.set_yscale("log", base=2)
        ax2.yaxis.set_major_locator(LogLocator(base=2))
        ax2.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "2^%d" % round(math.log2(v)) if v > 0 else ""))
    ax2.set_xlabel("optimizer step")
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=7)
    ax1.set_title("apex2amp verify: %s" % ("PASS" if verdict["passed"] else "FAIL"))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None
