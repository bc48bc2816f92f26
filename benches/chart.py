#!/usr/bin/env python3
"""Chart of a `copilotd bench repo` run.

Reads the run's results.json and writes results.png next to it: per package
(and over all packages), the speedup of each variant over `ar` measured in the
same run, and its acceptance length (new tokens per forward pass). A figure
of nothing (a variant whose tasks generated no token: `null` in results.json)
gets no bar.

    python3 benches/chart.py [benches/results/repo/results.json]

Needs matplotlib (see benches/README.md for the virtual environment).
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    """The summaries of a run as {(package, variant): summary}, with the
    packages and variants in the order of the file ("all" last)."""
    data = json.loads(Path(path).read_text())
    summaries = data["summaries"]
    packages, variants = [], []
    for s in summaries:
        if s["package"] not in packages:
            packages.append(s["package"])
        if s["variant"] not in variants:
            variants.append(s["variant"])
    by_key = {(s["package"], s["variant"]): s for s in summaries}
    return data, packages, variants, by_key


def grouped_bars(ax, packages, variants, by_key, field, colors, fmt):
    """One group of bars per package, one bar per variant (none where the
    figure is null); the values of the last group (the total) are written on
    its bars."""
    width = 0.8 / len(variants)
    for i, variant in enumerate(variants):
        xs, ys = [], []
        for j, package in enumerate(packages):
            s = by_key.get((package, variant))
            if s is not None and s.get(field) is not None:
                xs.append(j - 0.4 + (i + 0.5) * width)
                ys.append(s[field])
        ax.bar(xs, ys, width, label=variant, color=colors[i], edgecolor="white", linewidth=0.3)
        total = by_key.get((packages[-1], variant))
        if xs and total is not None and total.get(field) is not None:
            ax.annotate(fmt.format(ys[-1]), (xs[-1], ys[-1]), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", rotation=90, fontsize=7)
    # Separate the total from the packages.
    if packages and packages[-1] == "all":
        ax.axvline(len(packages) - 1.5, color="grey", linewidth=0.8, linestyle=":")
    ax.grid(axis="y", linewidth=0.3, alpha=0.6)
    ax.set_axisbelow(True)


def budget_note(budget):
    """The draft budget of the run, when results.json records it."""
    if not budget:
        return ""
    kind = "cost-aware" if budget.get("cost_aware") else "fixed"
    return f", {kind} draft budget ≤ {budget.get('max_nodes')} nodes, depth {budget.get('max_depth')}"


def decoding_note(sampling):
    """Greedy, or the sampling of the run, when results.json records it."""
    if not sampling or not sampling.get("temperature"):
        return "greedy"
    seed = sampling.get("seed")
    return f"temperature {sampling['temperature']}, top-p {sampling.get('top_p')}" + (
        f", seed {seed}" if seed is not None else ", unseeded")


def title(data):
    """The run's settings, in three short lines (a one-package chart is narrow)."""
    return (
        f"copilotd bench repo — {data.get('model', '?')}\n"
        f"{str(data.get('weights', '?')).split(' (')[0]}, {str(data.get('device', '?')).split(' (')[0]}, "
        f"{data.get('threads', '?')} threads, {decoding_note(data.get('sampling'))}\n"
        f"{data.get('tasks_per_package', '?')} tasks/package, up to {data.get('max_tokens', '?')} tokens"
        f"{budget_note(data.get('draft_budget'))}"
    )


def chart(path):
    data, packages, variants, by_key = load(path)
    if not packages:
        raise SystemExit(f"{path}: no summaries")
    cmap = plt.get_cmap("tab10" if len(variants) <= 10 else "tab20")
    colors = [cmap(i % cmap.N) for i in range(len(variants))]
    labels = [p.replace("==", "\n") for p in packages]

    fig, (speed, accept) = plt.subplots(2, 1, figsize=(max(9, 1.1 * len(packages) * (1 + len(variants) / 6)), 8.5),
                                        sharex=True)
    grouped_bars(speed, packages, variants, by_key, "speedup", colors, "{:.2f}x")
    speed.axhline(1.0, color="black", linewidth=0.9)
    speed.margins(y=0.12)
    speed.set_ylabel("speedup vs ar (same run)")
    # Over the whole figure, not the axes: the legend beside them leaves the axes narrow.
    fig.suptitle(title(data), fontsize=10)

    grouped_bars(accept, packages, variants, by_key, "acceptance_length", colors, "{:.2f}")
    accept.axhline(1.0, color="black", linewidth=0.9)
    accept.margins(y=0.12)
    accept.set_ylabel("acceptance length (tokens / forward pass)")
    accept.set_xticks(range(len(packages)), labels, fontsize=9)

    speed.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    save_beside(fig, path)


def save_beside(fig, path):
    """Writes the figure as results.png next to the run's results.json."""
    fig.tight_layout()
    out = Path(path).with_name("results.png")
    fig.savefig(out, dpi=110)
    print(f"written to {out}")


if __name__ == "__main__":
    chart(sys.argv[1] if len(sys.argv) > 1 else "benches/results/repo/results.json")
