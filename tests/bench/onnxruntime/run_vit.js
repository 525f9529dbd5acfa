#!/usr/bin/env node
// ONNX Runtime's side of the ViT rows of tests/bench/compare.py: runs a ViT exported by
// torch.onnx.export with onnxruntime-node on the CPU, in a process of its own, and prints one
// JSON line. compare.py builds the spec; by hand:
//
//   node tests/bench/onnxruntime/run_vit.js '{"mode": "time", "model": "vit.onnx",
//       "threads": 2, "batch": 1, "image_size": 224, "seconds": 10}'
//
// Modes:
//   idle   load onnxruntime-node and nothing else: {"version"} (the header's baseline memory)
//   check  run the raw float32 batch in spec.input ([batch, 3, size, size]) and compare the
//          logits with the raw float32 spec.reference: {"max_abs_diff", "classes", "version"}
//   time   the model alone on a random batch: one untimed run, then runs until at least
//          spec.seconds have passed (as the PyTorch side's seconds_per_call and vitk's
//          classify --benchmark): {"value": images/s, "runs", "seconds", "version"}
//
// Session: the CPU provider, spec.threads intra-op threads, 1 inter-op thread, sequential
// execution, graph optimisation level "all"; float32 throughout.
'use strict';

const fs = require('fs');
const ort = require('onnxruntime-node');

function sessionOptions(threads) {
  return {
    executionProviders: ['cpu'],
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  };
}

function readFloats(path, expected) {
  const bytes = fs.readFileSync(path);
  if (bytes.length !== expected * 4) {
    throw new Error(`${path}: ${bytes.length} bytes, expected ${expected} float32 values`);
  }
  // A copy: the Buffer's offset within Node's pool need not be 4-byte aligned.
  const out = new Float32Array(expected);
  for (let i = 0; i < expected; i++) out[i] = bytes.readFloatLE(4 * i);
  return out;
}

// Normal random numbers from a fixed seed (mulberry32 and Box-Muller): the images' values do
// not change the time, but the batch is the same from run to run.
function randomBatch(n, seed) {
  let state = seed >>> 0;
  const uniform = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) + 0.5) / 4294967296;
  };
  const out = new Float32Array(n);
  for (let i = 0; i < n; i += 2) {
    const r = Math.sqrt(-2 * Math.log(uniform()));
    const a = 2 * Math.PI * uniform();
    out[i] = r * Math.cos(a);
    if (i + 1 < n) out[i + 1] = r * Math.sin(a);
  }
  return out;
}

async function main() {
  const spec = JSON.parse(process.argv[2] || '{}');
  const version = ort.env.versions.node || ort.env.versions.common;
  if (spec.mode === 'idle') return { version };
  if (spec.mode !== 'check' && spec.mode !== 'time') {
    throw new Error(`unknown mode ${JSON.stringify(spec.mode)} (idle, check or time)`);
  }
  const session = await ort.InferenceSession.create(spec.model, sessionOptions(spec.threads));
  const dims = [spec.batch, 3, spec.image_size, spec.image_size];
  const count = dims.reduce((a, b) => a * b, 1);
  const run = (data) =>
    session.run({ [session.inputNames[0]]: new ort.Tensor('float32', data, dims) });

  if (spec.mode === 'check') {
    const logits = (await run(readFloats(spec.input, count)))[session.outputNames[0]];
    const reference = readFloats(spec.reference, logits.data.length);
    let worst = 0;
    for (let i = 0; i < reference.length; i++) {
      const d = Math.abs(logits.data[i] - reference[i]);
      if (Number.isNaN(d)) {
        worst = null; // NaN: JSON has no NaN; compare.py reads null as a failed check
        break;
      }
      if (d > worst) worst = d;
    }
    return { max_abs_diff: worst, classes: logits.dims[1], version };
  }

  const batch = randomBatch(count, 1);
  await run(batch); // untimed: the first run sets up buffers and kernels
  let runs = 0;
  let elapsed = 0;
  const start = process.hrtime.bigint();
  do {
    await run(batch);
    runs += 1;
    elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  } while (elapsed < spec.seconds);
  return { value: (spec.batch * runs) / elapsed, runs, seconds: elapsed, version };
}

main().then(
  (answer) => console.log(JSON.stringify(answer)),
  (err) => {
    console.error(`run_vit.js: ${err && err.stack ? err.stack : err}`);
    process.exit(1);
  },
);
