"""chart.py - an SVG bar chart of decode tok/s against the bandwidth limit
(no plotting library needed). One row per (model, devices): a bar for the
median decode tok/s (whisker: min to max), a mark at the limit, the
percentage at the right."""
from xml.sax.saxutils import escape

ROW_H, LEFT, WIDTH, RIGHT = 26, 250, 460, 80
COLORS = {"inproc": "#3b75af", "default": "#e1812c"}


def write_svg(path, results, title):
    rows = [(r, c) for r in results for c in r["configs"]]
    top = max([c["decode"]["tok_s"]["max"] for _, c in rows] + [r["limit_tok_s"] or 0 for r, _ in rows] + [1])
    scale = WIDTH / (top * 1.05)
    h = 60 + ROW_H * len(rows) + 40
    w = LEFT + WIDTH + RIGHT
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="12">' % (w, h), '<rect width="100%" height="100%" fill="white"/>',
           '<text x="10" y="20" font-size="14">%s</text>' % escape(title)]
    y = 40
    for r, c in rows:
        d = c["decode"]["tok_s"]
        color = COLORS["inproc"] if c["devices"] == "inproc" else COLORS["default"]
        label = "%s %s, %s" % (r["label"], r["expert_type"], c["devices"])
        out.append('<text x="%d" y="%d" text-anchor="end">%s</text>' % (LEFT - 6, y + 16, escape(label)))
        out.append('<rect x="%d" y="%d" width="%.1f" height="18" fill="%s"/>' % (LEFT, y + 3, d["median"] * scale, color))
        out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="black"/>' % (
            LEFT + d["min"] * scale, LEFT + d["max"] * scale, y + 12, y + 12))
        if r["limit_tok_s"]:
            x = LEFT + r["limit_tok_s"] * scale
            out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#c03030" stroke-width="3"/>' % (x, x, y, y + 24))
            out.append('<text x="%d" y="%d">%.0f%% of limit</text>' % (LEFT + WIDTH + 4, y + 16, c["pct_of_limit"]))
        y += ROW_H
    out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>' % (LEFT, LEFT + WIDTH, y + 4, y + 4))
    for i in range(6):
        v = top * 1.05 * i / 5
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%.0f</text>' % (LEFT + v * scale, y + 18, v))
    out.append('<text x="%d" y="%d">decode tok/s (bar: median, whisker: min-max, red mark: bandwidth limit)</text>'
               % (LEFT, y + 34))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
