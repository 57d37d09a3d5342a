// The charts of one job, drawn with Chart.js from JobTimeline::chart_data() (dashboard/
// job_timeline.hpp): the live job page updates them every second, `omnilearn report` draws them
// once from the data embedded in the file. Each canvas says how many points it shows
// (data-points), which the browser tests read.
(function (global) {
  'use strict';
  const palette = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2',
                   '#7f7f7f', '#bcbd22', '#17becf'];
  const lanes = ['job', 'join', 'generation', 'plan', 'leave', 'death', 'recovery', 'problem'];
  const laneColor = {job: '#5b6672', join: '#2ca02c', generation: '#1f77b4', plan: '#9467bd',
                     leave: '#ff7f0e', death: '#d62728', recovery: '#17becf', problem: '#8c564b'};

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    for (const child of children || []) {
      node.appendChild(typeof child === 'string' ? document.createTextNode(child) : child);
    }
    return node;
  }

  function xy(xs, ys) {
    const out = [];
    for (let i = 0; i < xs.length; ++i) out.push({x: xs[i], y: ys[i] === undefined ? null : ys[i]});
    return out;
  }

  function countPoints(chart) {
    let n = 0;
    for (const d of chart.data.datasets) n += d.data.filter(p => p && p.y !== null).length;
    return n;
  }

  function card(container, name, title, note, wide, before) {
    const canvas = el('canvas', {'data-chart': name, 'data-points': '0'});
    const box = el('div', {class: 'chart-box'}, [canvas]);
    const section = el('section', {class: 'card' + (wide ? ' wide' : ''), id: 'chart-' + name},
                       [el('h2', {}, [title]), box]);
    if (note) section.appendChild(el('p', {class: 'muted'}, [note]));
    container.insertBefore(section, before || null);
    return canvas;
  }

  function baseOptions(animate, xTitle, yTitle) {
    return {
      animation: animate ? undefined : false,
      responsive: true, maintainAspectRatio: false,
      interaction: {mode: 'nearest', intersect: false},
      plugins: {legend: {position: 'bottom'}},
      scales: {x: {type: 'linear', title: {display: true, text: xTitle}},
               y: {title: {display: true, text: yTitle}}},
    };
  }

  // Builds the charts in `container`; returns an object whose update(data) redraws them.
  function create(container, options) {
    const animate = !!(options && options.animate);
    container.classList.add('charts');
    const charts = {};
    // Every card first, then the charts: a chart measures its box when it is made, and the grid
    // gives the first card the whole row until the others exist.
    const canvases = {
      loss: card(container, 'loss', 'Loss and test accuracy'),
      batches: card(container, 'batches', 'Batch size per worker (stacked)',
                    'The controller gives each worker a batch sized to its speed; they always '
                    + 'sum to the global batch.'),
      throughput: card(container, 'throughput', 'Samples/s per worker'),
      steptime: card(container, 'steptime', 'Step time against the ideal',
                     'ideal: the global batch over the workers\' summed throughput (perfect '
                     + 'balance), plus the all-reduce'),
      timeline: card(container, 'timeline', 'Generations and membership events', null, true),
    };

    const lossOptions = baseOptions(animate, 'step', 'training loss');
    lossOptions.scales.y1 = {position: 'right', min: 0, max: 1,
                             title: {display: true, text: 'test accuracy'},
                             grid: {drawOnChartArea: false}};
    charts.loss = new Chart(canvases.loss, {
      type: 'line', options: lossOptions,
      data: {datasets: [
        {label: 'training loss', data: [], borderColor: palette[0], pointRadius: 0, borderWidth: 1.5},
        {label: 'test accuracy', data: [], yAxisID: 'y1', borderColor: palette[2],
         backgroundColor: palette[2], pointRadius: 3, showLine: true},
      ]},
    });

    const batchOptions = baseOptions(animate, 'step', 'samples per step');
    batchOptions.scales.y.stacked = true;
    batchOptions.scales.y.min = 0;
    charts.batches = new Chart(canvases.batches,
                               {type: 'line', options: batchOptions, data: {datasets: []}});
    charts.throughput = new Chart(canvases.throughput, {
      type: 'line', options: baseOptions(animate, 'step', 'samples/s'), data: {datasets: []}});

    charts.steptime = new Chart(canvases.steptime, {
      type: 'line', options: baseOptions(animate, 'step', 'seconds'),
      data: {datasets: [
        {label: 'step time', data: [], borderColor: palette[3], pointRadius: 0, borderWidth: 1.5},
        {label: 'slowest compute', data: [], borderColor: palette[1], pointRadius: 0,
         borderWidth: 1},
        {label: 'ideal', data: [], borderColor: palette[2], borderDash: [6, 4], pointRadius: 0,
         borderWidth: 1.5},
        {label: 'all-reduce', data: [], borderColor: palette[7], pointRadius: 0, borderWidth: 1},
      ]},
    });

    const timelineOptions = baseOptions(animate, 'seconds since submission', '');
    // One lane per kind of event, named on the axis (ticks at the lanes, not at the bounds).
    timelineOptions.scales.y = {type: 'linear', min: -0.5, max: lanes.length - 0.5, reverse: true,
                                afterBuildTicks: axis => { axis.ticks = lanes.map((_, i) => ({value: i})); },
                                ticks: {autoSkip: false, callback: v => lanes[v] || ''}};
    timelineOptions.plugins.legend = {display: false};
    timelineOptions.plugins.tooltip = {callbacks: {label: ctx => ctx.raw.text}};
    charts.timeline = new Chart(canvases.timeline, {
      type: 'scatter', options: timelineOptions,
      data: {datasets: [{label: 'events', data: [], pointRadius: 5,
                         pointBackgroundColor: ctx => laneColor[(ctx.raw || {}).category] || '#000'}]},
    });
    const list = el('div', {class: 'timeline-list'});
    container.querySelector('#chart-timeline').appendChild(list);

    // An asynchronous (ASP) job's own charts, made when its first data arrives (a job's data
    // says `asp`), before the timeline: the staleness of each second's pushes, and each
    // worker's updates per second (what proportional batches even out).
    function createAspCharts() {
      const before = container.querySelector('#chart-timeline');
      const staleness = card(container, 'staleness', 'Staleness per interval',
                             'server version at apply minus the version the worker pulled, over '
                             + 'each second\'s pushes', false, before);
      const updates = card(container, 'updates', 'Updates/s per worker',
                           'with proportional batches every worker pushes at about the same rate',
                           false, before);
      const fromZero = yTitle => {
        const o = baseOptions(animate, 'server updates', yTitle);
        o.scales.y.min = 0;
        return o;
      };
      charts.staleness = new Chart(staleness, {
        type: 'line', options: fromZero('versions'),
        data: {datasets: [
          {label: 'mean', data: [], borderColor: palette[0], pointRadius: 0, borderWidth: 1.5},
          {label: 'p95', data: [], borderColor: palette[1], pointRadius: 0, borderWidth: 1.5},
          {label: 'max', data: [], borderColor: palette[3], pointRadius: 0, borderWidth: 1},
        ]},
      });
      charts.updates = new Chart(updates, {
        type: 'line', options: fromZero('updates/s'),
        data: {datasets: []}});
    }

    function perWorker(chart, data, field, stacked) {
      chart.data.datasets = data.workers.map((w, i) => ({
        label: w.trainer + (w.node ? ' (' + w.node + ')' : ''),
        data: xy(data.steps, w[field]),
        borderColor: palette[i % palette.length],
        backgroundColor: palette[i % palette.length] + (stacked ? '99' : ''),
        fill: stacked ? (i === 0 ? 'origin' : '-1') : false,
        pointRadius: 0, borderWidth: 1.2, spanGaps: false,
      }));
    }

    function update(data) {
      if (data.asp) {
        if (!charts.staleness) createAspCharts();
        for (const name of ['loss', 'batches', 'throughput', 'steptime']) {
          charts[name].options.scales.x.title.text = 'server updates';
        }
        charts.steptime.data.datasets[0].label = 'time per update';
        charts.staleness.data.datasets[0].data = xy(data.steps, data.staleness.mean);
        charts.staleness.data.datasets[1].data = xy(data.steps, data.staleness.p95);
        charts.staleness.data.datasets[2].data = xy(data.steps, data.staleness.max);
        perWorker(charts.updates, data, 'updates_per_s', false);
      }
      charts.loss.data.datasets[0].data = xy(data.steps, data.loss);
      charts.loss.data.datasets[1].data = xy(data.evals.steps, data.evals.accuracy);
      perWorker(charts.batches, data, 'batch', true);
      perWorker(charts.throughput, data, 'samples_per_s', false);
      charts.steptime.data.datasets[0].data = xy(data.steps, data.step_time_s);
      charts.steptime.data.datasets[1].data = xy(data.steps, data.slowest_compute_s);
      charts.steptime.data.datasets[2].data = xy(data.steps, data.ideal_step_s);
      charts.steptime.data.datasets[3].data = xy(data.steps, data.allreduce_time_s);
      charts.timeline.data.datasets[0].data = data.timeline.map(t => ({
        x: t.time, y: Math.max(0, lanes.indexOf(t.category)), text: t.text, category: t.category}));
      for (const chart of Object.values(charts)) {
        chart.update('none');
        chart.canvas.setAttribute('data-points', String(countPoints(chart)));
      }
      list.replaceChildren(...data.timeline.slice().reverse().map(t => el('div', {}, [
        el('span', {class: 'chip', style: 'background:' + (laneColor[t.category] || '#ccc') + '33'},
           [t.category]),
        ' ' + (t.step >= 0 ? 'step ' + t.step + ': ' : '') + t.text])));
    }

    // PNG copies of every chart (for `omnilearn report` under a headless browser).
    function exportPngs() {
      for (const chart of Object.values(charts)) {
        const img = el('img', {class: 'png-export',
                               'data-chart': chart.canvas.getAttribute('data-chart'),
                               src: chart.toBase64Image('image/png')});
        document.body.appendChild(img);
      }
    }
    return {update, exportPngs, charts};
  }

  global.OmniCharts = {create, el};
})(window);
