// The console's few behaviours: plots that refresh themselves, and the live tail.
// Plots: any element with class "plot" and data-source (JSON {times, series}) becomes a uPlot chart.
const plots = {};

function toColumns(data) {
  const names = Object.keys(data.series).sort();
  return [names, [data.times, ...names.map(n => data.series[n])]];
}

// Series colours: hues a golden angle apart never repeat, and neighbours differ most; lightness
// alternates so that hues close on the circle still tell apart.
function colour(i) {
  return `hsl(${(i * 137.508) % 360}, 70%, ${i % 2 ? 35 : 50}%)`;
}

async function refreshPlot(el) {
  const response = await fetch(el.dataset.source);
  if (!response.ok) return;
  const [names, columns] = toColumns(await response.json());
  const key = el.id + "|" + names.join(",");
  if (!plots[el.id] || plots[el.id].key !== key) {
    if (plots[el.id]) plots[el.id].chart.destroy();
    const series = [{}, ...names.map((n, i) => ({label: n, stroke: colour(i), width: 2, spanGaps: true}))];
    const chart = new uPlot({width: Math.min(el.clientWidth || 800, 1000), height: 220, series: series}, columns, el);
    plots[el.id] = {key: key, chart: chart, el: el};
  } else {
    plots[el.id].chart.setData(columns);
  }
  el.dataset.points = columns[0].length;   // what a test (or a person) can read: samples plotted
}

htmx.onLoad(function (root) {
  root.querySelectorAll(".plot[data-source]").forEach(el => refreshPlot(el));
});

setInterval(function () {
  for (const id in plots) {
    if (document.body.contains(plots[id].el)) refreshPlot(plots[id].el);
    else { plots[id].chart.destroy(); delete plots[id]; }
  }
}, 3000);

// The live tail: server-sent events, one record each, newest on top.
let tail = null;

function cell(row, text, pre) {
  const td = row.insertCell();
  if (pre) { const p = document.createElement("pre"); p.textContent = text; td.appendChild(p); }
  else td.textContent = text;
}

function startTail(url) {
  stopTail();
  const status = document.getElementById("tail-status");
  tail = new EventSource(url);
  tail.onopen = () => { status.textContent = "tailing"; };
  tail.onerror = () => { status.textContent = "disconnected, retrying"; };
  tail.addEventListener("gone", () => { status.textContent = "the topic was deleted"; stopTail(); });
  tail.onmessage = function (event) {
    const r = JSON.parse(event.data);
    const row = document.querySelector("#tail tbody").insertRow(0);
    row.className = "record";
    cell(row, r.partition); cell(row, r.offset); cell(row, r.time);
    cell(row, r.key === null ? "null" : r.key, true);
    cell(row, r.value === null ? "null" : r.value, true);
    cell(row, r.headers.map(h => h[0] + ": " + h[1]).join("\n"), true);
  };
}

function stopTail() {
  if (tail) { tail.close(); tail = null; }
  const status = document.getElementById("tail-status");
  if (status) status.textContent = "stopped";
}

document.addEventListener("htmx:beforeSwap", function (event) {
  stopTail();
  // Error pages are pages too: show them instead of keeping the old one.
  if (event.detail.xhr.status >= 400) { event.detail.shouldSwap = true; event.detail.isError = false; }
});
