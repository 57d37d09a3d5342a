// The dashboard's pages: the cluster page (nodes, jobs, head counters) and the live job page,
// both polling the head's JSON API (GET only: the dashboard changes nothing). Also the summary
// block of `omnilearn report`, which has no server and draws from embedded data.
(function (global) {
  'use strict';
  const POLL_MS = 1000;

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    for (const child of children || []) {
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  function td(value, cls) { return el('td', cls ? {class: cls} : {}, [value]); }
  function num(value, digits) {
    return typeof value === 'number' ? value.toFixed(digits === undefined ? 0 : digits) : '';
  }
  function bytes(n) {
    if (!n) return '';
    if (n >= 1 << 30) return (n / (1 << 30)).toFixed(1) + ' GiB';
    if (n >= 1 << 20) return (n / (1 << 20)).toFixed(0) + ' MiB';
    return n + ' B';
  }
  function kv(container, pairs) {
    container.replaceChildren(...pairs.map(([k, v]) => el('div', {}, [el('span', {}, [k]), v])));
  }
  async function getJson(path) {
    const response = await fetch(path, {cache: 'no-store', credentials: 'same-origin'});
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    return body;
  }
  function stamp(error) {
    const updated = document.getElementById('updated');
    if (error) {
      updated.textContent = 'error: ' + error.message;
      updated.className = 'meta error';
    } else {
      updated.textContent = 'updated ' + new Date().toLocaleTimeString();
      updated.className = 'meta';
    }
  }
  function poll(fn) {
    const tick = async () => {
      try { await fn(); stamp(null); } catch (e) { stamp(e); }
      setTimeout(tick, POLL_MS);
    };
    tick();
  }

  function renderNodes(nodes) {
    const order = {alive: 0, suspect: 1, left: 2, dead: 3};
    nodes.sort((a, b) => (order[a.state] - order[b.state]) || a.name.localeCompare(b.name)
                         || a.incarnation - b.incarnation);
    document.querySelector('#nodes tbody').replaceChildren(...nodes.map(n => {
      const labels = Object.entries(n.resources.labels || {}).map(([k, v]) => k + '=' + v);
      const trainers = (n.actors || []).map(a => a.actor + ' (job ' + a.job + ', rank ' + a.rank
                                             + ', batch ' + a.batch + ', '
                                             + num(a.samples_per_s) + '/s)');
      return el('tr', {'data-node': n.name, 'data-state': n.state}, [
        td(n.name), td(n.id), td(n.state, 'state-' + n.state), td(n.incarnation, 'num'),
        td(num(n.last_heartbeat_ms / 1000, 1) + ' s', 'num'), td(num(n.resources.cpus, 1), 'num'),
        td(bytes(n.resources.memory_bytes), 'num'), td(n.resources.gpus, 'num'),
        td(labels.join(', ')), td(num(n.usage.load_average, 2), 'num'),
        td(bytes(n.usage.rss_bytes), 'num'), td(num(n.usage.slowdown, 2), 'num'),
        td(n.usage.cpu_quota ? num(n.usage.cpu_quota, 2) : '', 'num'),
        el('td', {}, trainers.length ? trainers.map(t => el('div', {}, [t])) : ['']),
      ]);
    }));
    document.getElementById('no-nodes').hidden = nodes.length > 0;
  }

  function renderJobs(jobs) {
    document.querySelector('#jobs tbody').replaceChildren(...jobs.map(j => el('tr', {'data-job': j.id}, [
      el('td', {}, [el('a', {href: '/jobs/' + encodeURIComponent(j.id)}, [j.id])]), td(j.name),
      td(j.state, 'state-' + j.state), td(j.step + (j.total_steps ? '/' + j.total_steps : ''), 'num'),
      td(j.generation, 'num'), td(num(j.loss, 4), 'num'), td(j.workers.length, 'num'), td(j.reason),
    ])));
    document.getElementById('no-jobs').hidden = jobs.length > 0;
  }

  function clusterPage() {
    document.addEventListener('DOMContentLoaded', () => poll(async () => {
      const status = await getJson('/api/status');
      renderNodes(status.nodes);
      renderJobs(status.jobs);
      kv(document.getElementById('counters'),
         Object.entries(status.counters).map(([k, v]) => [k, String(v)]));
    }));
  }

  function renderJobStatus(job, data) {
    document.title = 'OmniLearn job ' + job.id;
    document.getElementById('title').textContent = 'Job ' + job.id + (job.name ? ' — ' + job.name : '');
    const c = data.counters;
    kv(document.getElementById('job-status'), [
      ['state', el('span', {class: 'state-' + job.state}, [job.state])],
      ['step', job.step + (job.total_steps ? ' / ' + job.total_steps : '')],
      ['generation', String(job.generation)], ['loss', num(job.loss, 4)],
      ['policy', data.policy || ''], ['global batch', String(data.global_batch || '')],
      ['plan changes', String(c.plan_changes)], ['recoveries', String(c.recoveries)],
      ['lost steps', String(c.lost_steps)],
    ].concat(job.reason ? [['reason', job.reason]] : []));
    document.querySelector('#workers tbody').replaceChildren(...job.workers.map(w => el('tr', {}, [
      td(w.rank, 'num'), td(w.actor), td(w.node), td(w.batch, 'num'), td(num(w.samples_per_s), 'num'),
      td(num(1000 * w.step_time_s, 1) + ' ms', 'num'),
    ])));
  }

  function jobPage() {
    document.addEventListener('DOMContentLoaded', () => {
      const id = decodeURIComponent(location.pathname.replace(/^\/jobs\//, ''));
      const charts = OmniCharts.create(document.getElementById('charts'), {animate: false});
      poll(async () => {
        const data = await getJson('/api/jobs/' + encodeURIComponent(id));
        renderJobStatus(data.job || {id: id, workers: []}, data);
        charts.update(data);
      });
    });
  }

  // `omnilearn report`: summary.json as a table, then the charts, all from `report`.
  function reportPage(report) {
    const s = report.summary || {};
    const status = document.getElementById('summary');
    const pairs = [['status', el('span', {class: 'state-' + s.status}, [s.status || 'unknown'])],
                   ['steps', String(s.steps === undefined ? '' : s.steps)],
                   ['epochs', String(s.epochs === undefined ? '' : s.epochs)],
                   ['wall time', num(s.wall_time_s, 1) + ' s'],
                   ['generations', String(s.generations === undefined ? '' : s.generations)],
                   ['lost steps', String(s.lost_steps === undefined ? '' : s.lost_steps)]];
    if (typeof s.final_test_accuracy === 'number') {
      pairs.push(['test accuracy', num(s.final_test_accuracy, 4)]);
    }
    if (s.speedup_estimate && typeof s.speedup_estimate.speedup_over_uniform === 'number') {
      pairs.push(['speed-up over uniform batches',
                  num(s.speedup_estimate.speedup_over_uniform, 2) + 'x (ideal '
                  + num(s.speedup_estimate.ideal_speedup, 2) + 'x)']);
    }
    if (s.reason) pairs.push(['reason', s.reason]);
    kv(status, pairs);
    document.querySelector('#workers tbody').replaceChildren(...(s.workers || []).map(w => el('tr', {}, [
      td(w.rank, 'num'), td(w.name), td(w.node), td(w.final_batch, 'num'),
      td(num(w.samples_per_s), 'num'), td(num(1000 * w.compute_time_s, 1) + ' ms', 'num'),
    ])));
    const charts = OmniCharts.create(document.getElementById('charts'), {animate: false});
    charts.update(report.charts);
    if (location.hash === '#png') charts.exportPngs();
  }

  global.OmniDashboard = {clusterPage, jobPage, reportPage};
})(window);
