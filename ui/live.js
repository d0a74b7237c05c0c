// RocBoard's watcher (see ui/live.py for why it is not a Gradio timer).
// Reads #live-state (which run the panel shows, its version, language, whether it trains),
// asks rocboard/live once a second while that run trains, draws the charts it answers with
// Plotly.react, and presses a hidden refresh button (#live-refresh while the run trains,
// #live-refresh-all when it started or ended) only when the panel changed.
// The progress bar's words and width come with the charts, from the same reading, and are
// put back whenever a panel refresh (a later or an earlier reading, on a busy server seconds
// apart) rewrites them: the step it says is always the loss chart's last.
// It pauses while nobody can see the panel: the Train tab not shown (another tab of the page
// chosen: the charts have no layout box) or the browser tab in the background
// (document.hidden). Each tick there was a question, a chart redraw and a Gradio event for a
// panel nobody sees: with 8 runs live and the Runs tab open, the most of what the page and
// the web process spent (BENCHMARKS.md section 12). When the panel shows again (a tab
// switch: the chart's size changes; visibilitychange) it asks at once and brings the charts,
// the bar and the panel up to date.
// At the end: the Runs tab's node panel's refresh, pressed on the same rule (only while shown).
(() => {
  if (window.rocboardLive) return;
  const settings = window.rocboardLiveSettings || {};
  const TICK_MS = settings.tick_ms || 1000;
  const CHARTS = { loss: "loss-chart", memory: "memory-chart" };
  const drawn = { run: null, lang: null, version: "" }; // what the charts show
  let asking = false;
  let asked = { version: "", whole: false, at: 0 }; // the last panel refresh pressed, to press it once per change
  let watched = null; // the #live-state element observed
  let watchedProgress = null; // the #progress element observed
  const progress = { run: null, lang: null, percent: 0, text: "" }; // the bar of the reading drawn
  let plotly = null;

  function loadPlotly() {
    if (window.Plotly) return Promise.resolve(window.Plotly);
    if (!plotly) {
      plotly = new Promise((resolve, reject) => {
        const script = document.createElement("script");
        script.src = new URL(settings.plotly, window.location.href).href;
        script.async = true;
        script.onload = () => resolve(window.Plotly);
        script.onerror = () => { plotly = null; reject(new Error("plotly.js did not load")); };
        document.head.appendChild(script);
      });
    }
    return plotly;
  }
  loadPlotly().catch(() => {}); // at once: a cold page fetches it beside Gradio's own scripts

  function liveState() {
    const element = document.querySelector("#live-state [data-live]");
    if (!element) return null;
    const data = element.dataset;
    return { run: data.run || "", version: data.version || "", active: data.active === "1", lang: data.lang || "en", initial: data.initial === "1" };
  }

  function chartHost(name) {
    return document.querySelector("#" + CHARTS[name] + " .rb-chart");
  }

  // Whether anyone can see the panel: the browser tab in front and the Train tab chosen (a
  // hidden tab panel is display: none, so its charts have no layout box).
  function panelShown() {
    if (document.hidden) return false;
    const chart = document.getElementById(CHARTS.loss);
    return !!chart && chart.getClientRects().length > 0;
  }

  const resized = new ResizeObserver((entries) => {
    for (const entry of entries) {
      // A chart drawn in a hidden tab has no width: give it one when the tab shows.
      if (entry.contentRect.width > 0 && entry.target._fullLayout && window.Plotly) window.Plotly.Plots.resize(entry.target);
    }
  });

  const drawnFigures = {}; // the JSON of what each chart shows: an unchanged chart is not redrawn

  async function draw(name, figure) {
    const host = chartHost(name);
    if (!host || !figure) return;
    const text = JSON.stringify(figure);
    if (drawnFigures[name] === text && host._fullLayout) return;
    drawnFigures[name] = text;
    const Plotly = await loadPlotly();
    if (!host._rbObserved) { resized.observe(host); host._rbObserved = true; }
    const layout = Object.assign({}, figure.layout || {}, { autosize: true });
    await Plotly.react(host, figure.data || [], layout, { responsive: true, displaylogo: false });
  }

  function showProgress() {
    const state = liveState();
    if (!state || progress.run === null || state.run !== progress.run || state.lang !== progress.lang) return; // the panel's own
    const bar = document.querySelector("#progress .rb-progress");
    if (!bar) return;
    // Only the bar's own nodes are changed (Gradio replaces them with its next value).
    const text = bar.querySelector(".rb-progress-text");
    if (text && text.textContent !== progress.text) text.textContent = progress.text;
    const fill = bar.querySelector(".rb-progress-fill");
    const width = progress.percent.toFixed(1) + "%";
    if (fill && fill.style.width !== width) fill.style.width = width;
    const now = String(Math.round(progress.percent));
    if (bar.getAttribute("aria-valuenow") !== now) bar.setAttribute("aria-valuenow", now);
  }

  function keepProgress(run, lang, answer) {
    if (!answer.progress) return;
    progress.run = run;
    progress.lang = lang;
    progress.percent = Number(answer.progress.percent) || 0;
    progress.text = String(answer.progress.text || "");
    showProgress();
  }

  function clearCharts() {
    for (const name of Object.keys(CHARTS)) {
      const host = chartHost(name);
      if (host && host._fullLayout && window.Plotly) window.Plotly.purge(host);
      delete drawnFigures[name];
    }
    drawn.run = null;
    drawn.lang = null;
    drawn.version = "";
    progress.run = null;
  }

  function askPanel(version, whole) {
    const now = Date.now();
    if (asked.version === version && asked.whole === whole && now - asked.at < 5000) return; // pressed already: wait for it
    asked = { version, whole, at: now };
    // A run still training changes only its progress and readings: the small refresh.
    const button = document.querySelector(whole ? "#live-refresh-all" : "#live-refresh");
    if (button) button.click();
  }

  async function tick() {
    observe();
    if (!panelShown()) return; // nobody sees it: nothing asked, nothing pressed (see the top)
    const state = liveState();
    if (!state || asking || state.initial) return; // before the load event: see first()
    if (!state.run) {
      if (drawn.run !== null) clearCharts();
      return;
    }
    const same = state.run === drawn.run && state.lang === drawn.lang;
    // A run that no longer trains is asked about once, when the panel shows a new version of it.
    if (same && !state.active && drawn.version === state.version) return;
    asking = true;
    try {
      const url = new URL(settings.live, window.location.href);
      url.search = new URLSearchParams({ run: state.run, lang: state.lang, drawn: same ? drawn.version : "" }).toString();
      const response = await fetch(url.href, { cache: "no-store", credentials: "same-origin" });
      if (!response.ok) return;
      const answer = await response.json();
      if (answer.charts) {
        await Promise.all([draw("loss", answer.charts.loss), draw("memory", answer.charts.memory)]);
        keepProgress(state.run, state.lang, answer);
      }
      drawn.run = state.run;
      drawn.lang = state.lang;
      drawn.version = answer.version;
      const whole = answer.gone || answer.active !== state.active || !state.active;
      if (whole || answer.version !== state.version) askPanel(answer.version, whole);
    } catch (error) {
      // The server restarting, a dropped connection: the next tick asks again.
    } finally {
      asking = false;
    }
  }

  // The panel shown again: a tab switch (the Train tab's panel gets its size back) or the
  // browser tab brought to the front. Caught up at once, not at the next tick.
  let shownBefore = false;
  function onShown() {
    const shown = panelShown();
    if (shown && !shownBefore) setTimeout(tick, 0);
    shownBefore = shown;
  }
  const panelSized = new ResizeObserver(onShown);
  let watchedPanel = null; // the loss chart's element, whose size says whether its tab shows
  document.addEventListener("visibilitychange", onShown);

  function observe() {
    const chart = document.getElementById(CHARTS.loss);
    if (chart && chart !== watchedPanel) {
      watchedPanel = chart;
      panelSized.observe(chart);
    }
    const bar = document.querySelector("#progress");
    if (bar && bar !== watchedProgress) {
      watchedProgress = bar;
      // A panel refresh rewrote the bar: the reading the charts show goes back (a no-op when
      // it is the same; the script's own change finds nothing to change).
      new MutationObserver(showProgress).observe(bar, { subtree: true, childList: true, characterData: true, attributes: true });
    }
    const element = document.querySelector("#live-state");
    if (!element || element === watched) return;
    watched = element;
    // The panel showing another run, version or language: ask now, not at the next tick.
    // (A refresh this script asked for changes it too, to what was just drawn: no question then.)
    new MutationObserver(() => {
      const state = liveState();
      if (state && state.run === drawn.run && state.lang === drawn.lang && state.version === drawn.version) return;
      setTimeout(tick, 0);
    }).observe(element, { subtree: true, childList: true, attributes: true });
  }

  // A page just opened: the charts of the run its load event will show, asked for as soon as
  // the chart elements exist, without waiting for that event (Gradio's first answer comes a
  // second or more later on a cold page). The answer names the run and language; the panel,
  // when it arrives, is compared with them like any other.
  // Asked at once, while Gradio's own scripts load: drawn when the chart elements exist.
  const firstAnswer = (() => {
    const url = new URL(settings.live, window.location.href);
    url.search = new URLSearchParams({ first: "1" }).toString();
    return fetch(url.href, { cache: "no-store", credentials: "same-origin" })
      .then((response) => (response.ok ? response.json() : null))
      .catch(() => null);
  })();

  async function first() {
    const state = liveState();
    if (!state || !state.initial || drawn.run !== null || asking) return;
    asking = true;
    try {
      const answer = await firstAnswer;
      if (!answer) return;
      const now = liveState();
      if (!answer.run || !answer.charts || !now || !now.initial) return; // the panel got there first
      await Promise.all([draw("loss", answer.charts.loss), draw("memory", answer.charts.memory)]);
      drawn.run = answer.run;
      drawn.lang = answer.lang;
      drawn.version = answer.version;
      keepProgress(answer.run, answer.lang, answer);
    } catch (error) {
      // The load event's panel draws them instead.
    } finally {
      asking = false;
    }
  }

  // The Runs tab's node panel (ui/runs_tab.py, side by side only): its refresh, the hidden
  // #runs-node-tick button, pressed every node_tick_ms while the panel shows, and at once when
  // the browser tab comes to the front (a switch to the Runs tab refreshes it by itself). Not
  // while the browser tab is hidden, nor while another tab of the page is chosen, where the
  // gr.Timer it replaces ticked on (a node_markdown and a Gradio event every 3 s for a panel
  // nobody sees). With one slot the panel is hidden (no layout box): never pressed.
  const NODE_TICK_MS = settings.node_tick_ms || 3000;
  function nodeTick() {
    const panel = document.getElementById("runs-node");
    if (document.hidden || !panel || panel.getClientRects().length === 0) return;
    const button = document.getElementById("runs-node-tick");
    if (button) button.click();
  }
  setInterval(nodeTick, NODE_TICK_MS);
  document.addEventListener("visibilitychange", nodeTick);

  window.rocboardLive = { tick, drawn };
  setInterval(tick, TICK_MS);
  // Until the page has its chart elements, look for them often (the first chart of a cold page).
  const early = setInterval(() => {
    if (document.querySelector("#live-state") && chartHost("loss")) {
      clearInterval(early);
      first().finally(tick);
    }
  }, 25);
})();
