// transformers.js as its browser users run it: its browser bundle, in headless Chromium (SwiftShader,
// Chromium's software adapter, where the machine has no GPU), a pipeline over a model folder served to
// the page, with `device: 'webgpu'` unless OPTIONS_JSON names another (`"wasm"`, its default in a
// browser). Prints the pipeline's output as JSON.
//   node webgpu.mjs CHROMIUM MODELS_DIR MODEL TASK OPTIONS_JSON INPUT_JSON [NEW_TOKENS]
// OPTIONS_JSON: the pipeline's options picking the file, as the card's block has them for a device
// (`{"dtype": "q4"}`, `{"dtype": "fp32", "model_file_name": "model_w8"}`, `{"dtype": "fp32", "device": "wasm"}`).
// feature-extraction: embeddings (mean-pooled, normalized) of the texts in INPUT_JSON;
// text-generation: the greedy text written after the prompt INPUT_JSON.
import { createRequire } from 'node:module';
import path from 'node:path';
import { chromium } from 'playwright-core';
// The browser's flags and the page's server, as hfexport's own WebGPU check has them.
import { WEBGPU_ARGS, serve } from '../../hfexport/web/chromium.mjs';

const [executablePath, models, model, task, options, input, newTokens] = process.argv.slice(2);
// The page is served transformers.js's browser bundle, onnxruntime-web's .wasm and the model.
const ortDist = path.dirname(createRequire(import.meta.url).resolve('onnxruntime-web'));
const roots = {
  '/tjs/': path.resolve(ortDist, '..', '..', '@huggingface', 'transformers', 'dist'),
  '/ort/': ortDist,
  '/models/': models,
};

const { origin, close } = await serve((url) => {
  const [prefix, root] = Object.entries(roots).find(([prefix]) => url.startsWith(prefix)) ?? [];
  const file = root && path.join(root, path.normalize(url.slice(prefix.length)));
  return file && file.startsWith(root) ? file : undefined;
});
const browser = await chromium.launch({ executablePath, args: WEBGPU_ARGS });
let output;
try {
  const page = await browser.newPage();
  await page.goto(origin + '/');
  output = await page.evaluate(async ({ model, task, options, input, newTokens }) => {
    const { env, pipeline } = await import('/tjs/transformers.js');
    env.allowRemoteModels = false;
    env.allowLocalModels = true;
    env.localModelPath = '/models/';
    env.useBrowserCache = false;
    env.backends.onnx.wasm.wasmPaths = '/ort/'; // the package's own .wasm, not a CDN's
    const pipe = await pipeline(task, model, { device: 'webgpu', ...JSON.parse(options) });
    if (task === 'feature-extraction') {
      return (await pipe(JSON.parse(input), { pooling: 'mean', normalize: true })).tolist();
    }
    const [written] = await pipe(JSON.parse(input), { max_new_tokens: Number(newTokens), do_sample: false });
    return written.generated_text;
  }, { model, task, options, input, newTokens });
} finally {
  await browser.close();
  close();
}
console.log(JSON.stringify(output));
