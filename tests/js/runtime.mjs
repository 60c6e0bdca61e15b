// Which ONNX runtime transformers.js runs on here, imported before transformers.js itself.
// TRANSFORMERS_JS_RUNTIME=onnxruntime-web: the browser's runtime, the bundle transformers.js imports in
// a browser (`onnxruntime-web/webgpu`) on its wasm backend — the browser's .wasm, not the package's node
// entry, another build with other kernels — handed to transformers.js the way it takes a runtime from its
// host (`Symbol.for('onnxruntime')`). Otherwise onnxruntime-node, its default.
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import * as ort from 'onnxruntime-web/webgpu';

const web = process.env.TRANSFORMERS_JS_RUNTIME === 'onnxruntime-web';
if (web) {
  // Its own .wasm from the package (transformers.js would point a runtime without one at a CDN).
  ort.env.wasm.wasmPaths = path.dirname(createRequire(import.meta.url).resolve('onnxruntime-web')) + path.sep;
  ort.env.wasm.numThreads = 1;
  // transformers.js in node hands a runtime the cached files' paths; the browser bundle fetches what it is
  // given as URLs, so it gets their bytes, as a browser's fetch would give them.
  const bytes = async (file) => (typeof file === 'string' ? new Uint8Array(await readFile(file)) : file);
  const create = ort.InferenceSession.create.bind(ort.InferenceSession);
  ort.InferenceSession.create = async (model, options = {}) => {
    const externalData = options.externalData
      && await Promise.all(options.externalData.map(async (e) => (typeof e === 'string'
        ? { path: path.basename(e), data: await bytes(e) }
        : { ...e, data: await bytes(e.data) })));
    return create(await bytes(model), externalData ? { ...options, externalData } : options);
  };
  globalThis[Symbol.for('onnxruntime')] = ort;
}

// The options that pick it: transformers.js lists no device for a runtime it was handed, so `auto`
// with the runtime's own provider; it feeds that runtime as it feeds any.
export const device = web ? { device: 'auto', session_options: { executionProviders: ['wasm'] } } : { device: 'cpu' };
