// onnxruntime-web's wasm backend under node, driven by hfexport's worker (hfexport/web/wasm.py).
//   node ort_wasm.mjs ONNXRUNTIME_WEB_DIR
// The same JavaScript and .wasm a browser runs with transformers.js, which imports
// `onnxruntime-web/webgpu` (its wasm provider is that bundle's asyncify build; the package's plain
// `wasm` entry is another build, with kernels the browser's lacks: GatherBlockQuantized), not
// onnxruntime-node: a graph and its external data handed over as bytes, as a browser fetches them.
//
// Frames on stdin and stdout: one JSON line, then the raw bytes its `bytes` fields count, in order.
//   {"op": "open", "path": FILE, "external": [[NAME, FILE], ...]}  -> {"session": N, "inputs": [...], "outputs": [...]}
//   {"op": "run", "session": N, "feeds": [{name, type, dims, bytes}]} + bytes -> {"outputs": [{name, type, dims, bytes}]} + bytes
//   {"op": "close", "session": N}                                   -> {}
// An error answers {"error": "..."}, and the process goes on.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [packageDir] = process.argv.slice(2);
const ort = await import(pathToFileURL(path.join(packageDir, 'dist', 'ort.webgpu.min.mjs')).href);
ort.env.wasm.wasmPaths = pathToFileURL(path.join(packageDir, 'dist') + path.sep).href;
ort.env.wasm.numThreads = 1; // a check, not a timing: the same answer on every machine
ort.env.logLevel = 'error';

const ARRAYS = {
  float32: Float32Array, float16: Uint16Array, int64: BigInt64Array, int32: Int32Array,
  int8: Int8Array, uint8: Uint8Array, bool: Uint8Array, float64: Float64Array,
};
const sessions = new Map();
let nextSession = 1;

function write(header, buffers = []) {
  process.stdout.write(JSON.stringify(header) + '\n');
  for (const buffer of buffers) process.stdout.write(buffer);
}

async function handle(header, body) {
  if (header.op === 'open') {
    const model = await readFile(header.path);
    const externalData = await Promise.all(
      (header.external ?? []).map(async ([name, file]) => ({ path: name, data: await readFile(file) })),
    );
    const session = await ort.InferenceSession.create(model, { executionProviders: ['wasm'], externalData });
    const id = nextSession++;
    sessions.set(id, session);
    return [{ session: id, inputs: session.inputNames, outputs: session.outputNames }, []];
  }
  if (header.op === 'run') {
    const session = sessions.get(header.session);
    const feeds = {};
    let offset = 0;
    for (const feed of header.feeds) {
      const bytes = body.subarray(offset, offset + feed.bytes);
      offset += feed.bytes;
      const copy = new Uint8Array(bytes).buffer; // aligned for the typed array
      const data = feed.type === 'bool' ? new Uint8Array(copy) : new ARRAYS[feed.type](copy);
      feeds[feed.name] = new ort.Tensor(feed.type, data, feed.dims);
    }
    const results = await session.run(feeds);
    const outputs = [];
    const buffers = [];
    for (const name of session.outputNames) {
      const tensor = results[name];
      const data = tensor.data;
      const buffer = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
      outputs.push({ name, type: tensor.type, dims: tensor.dims, bytes: buffer.length });
      buffers.push(buffer);
    }
    return [{ outputs }, buffers];
  }
  if (header.op === 'close') {
    await sessions.get(header.session)?.release();
    sessions.delete(header.session);
    return [{}, []];
  }
  throw new Error(`unknown op ${header.op}`);
}

// Read frames: a header line, then its bytes.
let pending = Buffer.alloc(0);
let waiting = null; // a header whose bytes have not all come
let chain = Promise.resolve();

function frames() {
  for (;;) {
    if (waiting === null) {
      const end = pending.indexOf(10);
      if (end < 0) return;
      waiting = JSON.parse(pending.subarray(0, end).toString('utf8'));
      pending = pending.subarray(end + 1);
    }
    const size = (waiting.feeds ?? []).reduce((sum, feed) => sum + feed.bytes, 0);
    if (pending.length < size) return;
    const header = waiting;
    const body = pending.subarray(0, size);
    pending = pending.subarray(size);
    waiting = null;
    chain = chain.then(async () => {
      try {
        const [answer, buffers] = await handle(header, body);
        write(answer, buffers);
      } catch (error) {
        write({ error: String(error?.message ?? error).slice(0, 2000) });
      }
    });
  }
}

write({ ready: true, version: ort.env.versions.web });
process.stdin.on('data', (chunk) => {
  pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
  frames();
});
process.stdin.on('end', () => chain.then(() => process.exit(0)));
