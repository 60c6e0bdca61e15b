// onnxruntime-web's WebGPU execution provider, in headless Chromium, driven by hfexport's worker
// (hfexport/web/webgpu.py). The build transformers.js loads in browsers (`onnxruntime-web/webgpu`,
// ORT's native WebGPU provider), on Chromium's software adapter (SwiftShader) where no GPU is.
//   node ort_webgpu.mjs ONNXRUNTIME_WEB_DIR CHROMIUM < [{"graph": FILE, "external": [[NAME, FILE], ...]}, ...]
// Opens a session on each graph, one browser for all, and prints one JSON line, a list in the same
// order: where ONNX Runtime placed each node (its verbose log, `VerifyEachNodeIsAssignedToAnEp`),
// as {"placed": {PROVIDER: [[OP_TYPE, NODE_NAME], ...]}, "counts": {PROVIDER: N}}, or {"error": ...}.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { WEBGPU_ARGS, serve } from './chromium.mjs';

const [packageDir, executablePath] = process.argv.slice(2);
// Beside onnxruntime-web, by path: in a `pip install` both live in the user's cache, not beside this file.
const playwright = path.join(packageDir, '..', 'playwright-core', 'index.mjs');
const { chromium } = await import(pathToFileURL(playwright).href);
const graphs = JSON.parse(readFileSync(0, 'utf8'));
const dist = path.join(packageDir, 'dist');
const files = new Map(); // URL path -> file
graphs.forEach((graph, index) => {
  files.set(`/g${index}/graph.onnx`, graph.graph);
  for (const [name, file] of graph.external ?? []) files.set(`/g${index}/${name}`, file);
});

// The page, the runtime and the graphs, from disk on this machine's loopback (in the sandbox, its
// own namespace's).
const { origin, close } = await serve((url) => (url.startsWith('/ort/') ? path.join(dist, path.basename(url)) : files.get(url)));
const browser = await chromium.launch({ executablePath, args: WEBGPU_ARGS });
const answers = [];
try {
  const page = await browser.newPage();
  let lines = [];
  page.on('console', (message) => lines.push(message.text()));
  await page.goto(origin + '/');
  for (const [index, graph] of graphs.entries()) {
    lines = [];
    const opened = await page.evaluate(async ({ base, names }) => {
      const ort = await import(`${location.origin}/ort/ort.webgpu.min.mjs`);
      ort.env.wasm.numThreads = 1;
      ort.env.logLevel = 'verbose';
      if (!(await navigator.gpu?.requestAdapter())) return { error: 'this Chromium gives no WebGPU adapter' };
      const externalData = names.map((name) => ({ path: name, data: `${base}/${name}` }));
      try {
        const session = await ort.InferenceSession.create(`${base}/graph.onnx`, {
          executionProviders: ['webgpu'], logSeverityLevel: 0, logVerbosityLevel: 0, externalData,
        });
        await session.release();
        return {};
      } catch (error) {
        return { error: String(error?.message ?? error).slice(0, 2000) };
      }
    }, { base: `${origin}/g${index}`, names: (graph.external ?? []).map(([name]) => name) });
    answers.push({ ...opened, ...placement(lines) });
  }
} finally {
  await browser.close();
  close();
}
console.log(JSON.stringify(answers));

// ORT's verbose log of a session's placement: a header per provider with its number of nodes, then
// one ` OpType (node name)` line per node ("All nodes placed on [P]" lists none).
function placement(lines) {
  const placed = {};
  const counts = {};
  let provider = null;
  for (const line of lines) {
    const [, text] = line.split('VerifyEachNodeIsAssignedToAnEp]');
    if (text === undefined) continue;
    const header = text.match(/(?:All nodes|Node\(s\)) placed on \[(\w+)\]\. Number of nodes: (\d+)/);
    if (header) {
      provider = header[1];
      placed[provider] ??= [];
      counts[provider] = Number(header[2]);
      continue;
    }
    const node = text.match(/^\s+(\S+) \((.*)\)$/);
    if (node && provider) placed[provider].push([node[1], node[2]]);
  }
  return { placed, counts };
}
