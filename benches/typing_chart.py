#!/usr/bin/env python3
"""Chart of a `copilotd bench typing` run.

Reads the run's results.json and writes results.png next to it: per strategy,
feedback (when on) and start (warm daemon, or right after a start), the keystroke-to-suggestion
latency (p50 and p95), the share of keystrokes with a useful suggestion on
screen, the share of the body's characters taken from suggestions, and the
server's CPU time per character of the body.

    python3 benches/typing_chart.py [benches/results/typing/results.json]

Needs matplotlib (see benches/README.md for the virtual environment).
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
from chart import save_beside  # noqa: E402  (benches/chart.py, beside this file)

PANELS = [
    # (fields, axis label, value format)
    (("latency_p50_ms", "latency_p95_ms"), "keystroke → suggestion, ms (p50, p95)", "{:.0f}"),
    (("useful_share", "accepted_share"), "useful on screen, accepted share", "{:.0%}"),
    (("cpu_ms_per_char",), "server CPU ms per character", "{:.1f}"),
]


def chart(path):
    data = json.loads(Path(path).read_text())
    summaries = data["summaries"]
    if not summaries:
        raise SystemExit(f"{path}: no summaries")
    labels = [f"{s['strategy']}{' +feedback' if s.get('feedback') else ''}\n{s['start']}" for s in summaries]
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 4.2))
    for ax, (fields, title, fmt) in zip(axes, PANELS):
        width = 0.8 / len(fields)
        for i, field in enumerate(fields):
            xs = [j - 0.4 + (i + 0.5) * width for j in range(len(summaries))]
            values = [s[field] for s in summaries]  # a latency is null where no suggestion was shown
            ys = [0 if v is None else v for v in values]
            bars = ax.bar(xs, ys, width, label=field.replace("_", " "))
            for bar, y, value in zip(bars, ys, values):
                text = "n/a" if value is None else fmt.format(value)
                ax.annotate(text, (bar.get_x() + bar.get_width() / 2, y), xytext=(0, 2),
                            textcoords="offset points", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(summaries)), labels, fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.margins(y=0.15)
        ax.grid(axis="y", linewidth=0.3, alpha=0.6)
        ax.set_axisbelow(True)
        if len(fields) > 1:
            ax.legend(fontsize=7, frameon=False)
    cpu = data.get("machine", {}).get("cpu", "?")
    fig.suptitle(
        f"copilotd bench typing — {data.get('tasks_per_package', '?')} tasks/package, up to "
        f"{data.get('max_chars', '?')} characters per body, maxTokens {data.get('max_tokens', '?')}\n{cpu}",
        fontsize=10,
    )
    save_beside(fig, path)


if __name__ == "__main__":
    chart(sys.argv[1] if len(sys.argv) > 1 else "benches/results/typing/results.json")
