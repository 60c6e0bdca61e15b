// transformers.js as its browser users run it on WebGPU: its browser bundle, in headless Chromium
// (SwiftShader, Chromium's software adapter, where the machine has no GPU), a pipeline with
// `device: 'webgpu'` over a model folder served to the page. Prints the pipeline's output as JSON.
//   node webgpu.mjs CHROMIUM MODELS_DIR MODEL TASK DTYPE INPUT_JSON [NEW_TOKENS]
// feature-extraction: embeddings (mean-pooled, normalized) of the texts in INPUT_JSON;
// text-generation: the greedy text written after the prompt INPUT_JSON.
import { createReadStream } from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import path from 'node:path';
import { chromium } from 'playwright-core';

const [executablePath, models, model, task, dtype, input, newTokens] = process.argv.slice(2);
// The page is served transformers.js's browser bundle, onnxruntime-web's .wasm and the model.
const ortDist = path.dirname(createRequire(import.meta.url).resolve('onnxruntime-web'));
const roots = {
  '/tjs/': path.resolve(ortDist, '..', '..', '@huggingface', 'transformers', 'dist'),
  '/ort/': ortDist,
  '/models/': models,
};

const server = http.createServer((request, response) => {
  const url = decodeURIComponent(new URL(request.url, 'http://127.0.0.1').pathname);
  if (url === '/') {
    response.writeHead(200, { 'content-type': 'text/html' });
    response.end('<!doctype html><title>transformers.js on WebGPU</title>');
    return;
  }
  const [prefix, root] = Object.entries(roots).find(([prefix]) => url.startsWith(prefix)) ?? [];
  const file = root && path.join(root, path.normalize(url.slice(prefix.length)));
  if (!file || !file.startsWith(root)) {
    response.writeHead(404);
    response.end();
    return;
  }
  const type = /\.m?js$/.test(file) ? 'text/javascript' : file.endsWith('.wasm') ? 'application/wasm' : file.endsWith('.json') ? 'application/json' : 'application/octet-stream';
  createReadStream(file)
    .on('open', () => response.writeHead(200, { 'content-type': type }))
    .on('error', () => { response.writeHead(404); response.end(); })
    .pipe(response);
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const origin = `http://127.0.0.1:${server.address().port}`; // a secure context, as WebGPU requires

const browser = await chromium.launch({
  executablePath,
  args: [
    '--no-sandbox', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--enable-unsafe-webgpu', '--enable-features=Vulkan',
    '--use-vulkan=swiftshader', '--use-webgpu-adapter=swiftshader', '--enable-unsafe-swiftshader',
  ],
});
let output;
try {
  const page = await browser.newPage();
  await page.goto(origin + '/');
  output = await page.evaluate(async ({ model, task, dtype, input, newTokens }) => {
    const { env, pipeline } = await import('/tjs/transformers.js');
    env.allowRemoteModels = false;
    env.allowLocalModels = true;
    env.localModelPath = '/models/';
    env.useBrowserCache = false;
    env.backends.onnx.wasm.wasmPaths = '/ort/'; // the package's own .wasm, not a CDN's
    const pipe = await pipeline(task, model, { dtype, device: 'webgpu' });
    if (task === 'feature-extraction') {
      return (await pipe(JSON.parse(input), { pooling: 'mean', normalize: true })).tolist();
    }
    const [written] = await pipe(JSON.parse(input), { max_new_tokens: Number(newTokens), do_sample: false });
    return written.generated_text;
  }, { model, task, dtype, input, newTokens });
} finally {
  await browser.close();
  server.close();
}
console.log(JSON.stringify(output));
