// Which ONNX runtime transformers.js runs on here, imported before transformers.js itself.
// TRANSFORMERS_JS_RUNTIME=onnxruntime-web: the browser's runtime, onnxruntime-web's wasm backend (the
// package's node entry: the browser's .wasm, files read from disk), handed to transformers.js the way
// it takes a runtime from its host (`Symbol.for('onnxruntime')`). Otherwise onnxruntime-node, its default.
import { createRequire } from 'node:module';
import path from 'node:path';
import * as ort from 'onnxruntime-web';

const web = process.env.TRANSFORMERS_JS_RUNTIME === 'onnxruntime-web';
if (web) {
  // Its own .wasm from the package (transformers.js would point a runtime without one at a CDN).
  ort.env.wasm.wasmPaths = path.dirname(createRequire(import.meta.url).resolve('onnxruntime-web')) + path.sep;
  ort.env.wasm.numThreads = 1;
  globalThis[Symbol.for('onnxruntime')] = ort;
}

// The options that pick it: transformers.js lists no device for a runtime it was handed, so `auto`
// with the runtime's own provider; it feeds that runtime as it feeds any.
export const device = web ? { device: 'auto', session_options: { executionProviders: ['wasm'] } } : { device: 'cpu' };
