// The timing loop of `albert-edge profile --runtime node|chromium`, the same in Node and in the
// browser: load one file, one first call, the warm-up, then timed calls by the profiler's own rule
// (albert_edge/profile/stats.py time_until): at least `runs` calls and `min_seconds`, then rounds of
// a quarter more calls until the p50's 95 % interval is narrower than `ci_target` of the p50 or
// `max_seconds` of timed calls have passed. Each call is timed with performance.now(); Python turns
// the call times into the record's statistics, so both sides of a comparison share one formula.

import { feedsOf } from './tensors.mjs';

const Z = 1.959963984540054; // two-sided 95 %

/** Width of the p50's distribution-free interval as a share of the p50 (null below 5 calls). */
export function ciWidth(times) {
  const t = Float64Array.from(times).sort();
  const n = t.length;
  if (n < 5) return null;
  const half = Z * Math.sqrt(n * 0.25);
  const lo = Math.max(Math.floor(n * 0.5 - half), 0);
  const hi = Math.min(Math.ceil(n * 0.5 + half), n - 1);
  const middle = n % 2 ? t[(n - 1) / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
  return middle > 0 ? (t[hi] - t[lo]) / middle : null;
}

/** The smallest step of performance.now() seen over a few thousand readings (browsers coarsen the
 *  clock: 5 µs on a cross-origin isolated page, 100 µs on another). */
export function timerResolution() {
  let step = Infinity;
  let last = performance.now();
  for (let i = 0; i < 5000; i += 1) {
    const now = performance.now();
    if (now > last) step = Math.min(step, now - last);
    last = now;
  }
  return Number.isFinite(step) ? step : null;
}

async function timeFor(call, runs, seconds, times) {
  const deadline = performance.now() + seconds * 1e3;
  while (times.length < runs || performance.now() < deadline) {
    const start = performance.now();
    await call();
    times.push(performance.now() - start);
  }
  return times;
}

/** The stopping rule above; the call times in ms and why it stopped ("interval" | "budget"). */
export async function timeUntil(call, { runs, min_seconds: minSeconds, max_seconds: maxSeconds, ci_target: target }) {
  const times = await timeFor(call, runs, minSeconds, []);
  for (;;) {
    const width = ciWidth(times);
    if (width !== null && width <= target) return { times, stoppedBy: 'interval' };
    const spent = times.reduce((a, b) => a + b, 0) / 1e3;
    if (spent >= maxSeconds) return { times, stoppedBy: 'budget' };
    await timeFor(call, times.length + Math.max(Math.floor(times.length / 4), 1),
                  Math.min(Math.max(0.2, spent / 4), maxSeconds - spent), times);
  }
}

/** One measurement of `request` (model, feeds, warmup, runs, ...): `open()` gives what
 *  InferenceSession.create takes, `phase(name)` is called at each phase (memory readings, the
 *  start and end of the timed calls). */
export async function profileFile(ort, request, open, sessionOptions, phase = async () => {}) {
  const model = await open();
  await phase('before_load');
  let start = performance.now();
  const session = await ort.InferenceSession.create(model, sessionOptions);
  const loadMs = performance.now() - start;
  await phase('after_load');
  const all = feedsOf(ort, request.feeds);
  const feeds = Object.fromEntries(session.inputNames.map((name) => [name, all[name]]));
  const missing = session.inputNames.filter((name) => !all[name]);
  if (missing.length) throw new Error(`the file takes inputs the profiler does not feed: ${missing.join(', ')}`);
  start = performance.now();
  await session.run(feeds);
  const firstMs = performance.now() - start;
  await phase('after_first_call');
  // At least `warmup` calls and `warmup_seconds`: V8 first compiles WebAssembly with its baseline
  // compiler and swaps in optimized code for hot functions in the background, while calls go on.
  const warm = performance.now() + (request.warmup_seconds || 0) * 1e3;
  let warmupCalls = 0;
  for (; warmupCalls < request.warmup || performance.now() < warm; warmupCalls += 1) await session.run(feeds);
  await phase('timing_start');
  const { times, stoppedBy } = await timeUntil(() => session.run(feeds), request);
  await phase('timing_end');
  await phase('after_timed');
  await session.release();
  return {
    load_ms: loadMs, first_call_ms: firstMs, times, stopped_by: stoppedBy, inputs: session.inputNames,
    warmup_calls: warmupCalls, timer_resolution_ms: timerResolution(),
  };
}
