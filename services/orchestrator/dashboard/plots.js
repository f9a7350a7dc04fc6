// Small time-series plots as inline SVG, written by hand: the dashboard is plain static files with
// no build step and a strict CSP, and what it needs (a few lines over one hour, two axes, a legend)
// is less code than loading and styling a charting library. Values come in as columns: `times`
// (epoch ms) and per series one value (or null: nothing measured) per time.

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 320;
const HEIGHT = 120;
const PAD = { left: 44, right: 8, top: 8, bottom: 20 };
const COLORS = [
  "#2563eb",
  "#16a34a",
  "#dc2626",
  "#d97706",
  "#7c3aed",
  "#0891b2",
  "#db2777",
  "#4b5563",
  "#65a30d",
  "#9333ea",
  "#ea580c",
];

function svg(tag, attrs = {}, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

const clock = (ms) => new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });

/** A y-axis top that reads well: 1, 2 or 5 times a power of ten, at least `max`. */
function niceMax(max) {
  if (!(max > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(max));
  return [1, 2, 5, 10].map((m) => m * power).find((m) => m >= max) ?? 10 * power;
}

/** Polyline point lists, broken where a value is missing. */
function runs(values, x, y) {
  const out = [];
  let current = [];
  values.forEach((v, i) => {
    if (v === null || v === undefined) {
      if (current.length > 0) out.push(current);
      current = [];
    } else current.push(`${x(i).toFixed(1)},${y(v).toFixed(1)}`);
  });
  if (current.length > 0) out.push(current);
  return out;
}

/**
 * Draws the plot into `host` (replacing what it held). `series`: [{ name, values }]; `format`
 * turns a y value into its axis label; `yMax` fixes the top (e.g. 1 for ratios).
 */
export function renderPlot(host, { title, times, series, format = String, yMax, empty = "no data yet" }) {
  const shown = series.filter((s) => s.values.some((v) => v !== null && v !== undefined));
  const figure = svg("svg", {
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    role: "img",
    "aria-label": title,
    class: "plot",
    "data-testid": "plot-svg",
  });
  const left = PAD.left;
  const right = WIDTH - PAD.right;
  const top = PAD.top;
  const bottom = HEIGHT - PAD.bottom;
  figure.append(
    svg("line", { x1: left, y1: bottom, x2: right, y2: bottom, class: "axis" }),
    svg("line", { x1: left, y1: top, x2: left, y2: bottom, class: "axis" }),
  );
  if (times.length === 0 || shown.length === 0) {
    figure.append(
      svg(
        "text",
        {
          x: (left + right) / 2,
          y: (top + bottom) / 2,
          "text-anchor": "middle",
          class: "plot-empty",
          "data-testid": "plot-empty",
        },
        empty,
      ),
    );
    host.replaceChildren(figure);
    return;
  }
  const max = yMax ?? niceMax(Math.max(...shown.flatMap((s) => s.values.filter((v) => v !== null && v !== undefined))));
  const span = Math.max(1, times.length - 1);
  const x = (i) => left + ((right - left) * i) / span;
  const y = (v) => bottom - ((bottom - top) * Math.min(v, max)) / max;
  for (const [v, cls] of [
    [max, "y-label"],
    [max / 2, "y-label"],
    [0, "y-label"],
  ]) {
    figure.append(svg("line", { x1: left, y1: y(v), x2: right, y2: y(v), class: "grid" }));
    figure.append(
      svg("text", { x: left - 4, y: y(v) + 3, "text-anchor": "end", class: cls, "data-testid": "y-label" }, format(v)),
    );
  }
  const first = times[0];
  const last = times[times.length - 1];
  figure.append(
    svg(
      "text",
      { x: left, y: HEIGHT - 4, "text-anchor": "start", class: "x-label", "data-testid": "x-label" },
      clock(first),
    ),
  );
  figure.append(
    svg(
      "text",
      { x: right, y: HEIGHT - 4, "text-anchor": "end", class: "x-label", "data-testid": "x-label" },
      clock(last),
    ),
  );
  const legend = document.createElement("ul");
  legend.className = "legend";
  shown.forEach((s, n) => {
    const color = COLORS[series.indexOf(s) % COLORS.length];
    const points = s.values.filter((v) => v !== null && v !== undefined).length;
    for (const run of runs(s.values, x, y)) {
      // One point alone draws as a dot: a polyline of one point is invisible.
      if (run.length === 1) {
        const [cx, cy] = run[0].split(",");
        figure.append(svg("circle", { cx, cy, r: 2, fill: color, "data-series": s.name }));
      } else
        figure.append(
          svg("polyline", {
            points: run.join(" "),
            fill: "none",
            stroke: color,
            "stroke-width": 1.5,
            "data-series": s.name,
          }),
        );
    }
    const latest = [...s.values].reverse().find((v) => v !== null && v !== undefined);
    const item = document.createElement("li");
    item.dataset.testid = "legend-item";
    item.dataset.series = s.name;
    item.dataset.points = String(points);
    item.style.setProperty("--swatch", color);
    item.textContent = `${s.name} ${format(latest)}`;
    legend.append(item);
    if (n === 0) figure.dataset.points = String(points);
  });
  host.replaceChildren(figure, legend);
}
