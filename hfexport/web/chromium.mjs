// What every WebGPU page hfexport drives in headless Chromium needs: the browser's flags, and a
// server that streams the page's files from disk on the loopback (ort_webgpu.mjs, and the tests'
// tests/js/webgpu.mjs).
import { createReadStream } from 'node:fs';
import http from 'node:http';

// Chromium's WebGPU on SwiftShader, and none of its own network traffic (the machine may have none).
export const WEBGPU_ARGS = [
  '--no-sandbox', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--enable-unsafe-webgpu', '--enable-features=Vulkan',
  '--use-vulkan=swiftshader', '--use-webgpu-adapter=swiftshader', '--enable-unsafe-swiftshader',
];

const TYPES = [[/\.m?js$/, 'text/javascript'], [/\.wasm$/, 'application/wasm'], [/\.json$/, 'application/json']];

// Serves an empty page at `/` and, at every other path, the file `lookup(path)` names (none: 404),
// streamed, since a graph may be gigabytes. Returns its origin — 127.0.0.1, a secure context, as
// WebGPU requires — and `close`.
export async function serve(lookup) {
  const server = http.createServer((request, response) => {
    const url = decodeURIComponent(new URL(request.url, 'http://127.0.0.1').pathname);
    if (url === '/') {
      response.writeHead(200, { 'content-type': 'text/html' });
      response.end('<!doctype html><title>hfexport</title>');
      return;
    }
    const file = lookup(url);
    if (!file) {
      response.writeHead(404);
      response.end();
      return;
    }
    const type = TYPES.find(([pattern]) => pattern.test(file))?.[1] ?? 'application/octet-stream';
    createReadStream(file)
      .on('open', () => response.writeHead(200, { 'content-type': type }))
      .on('error', () => { response.writeHead(404); response.end(); })
      .pipe(response);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { origin: `http://127.0.0.1:${server.address().port}`, close: () => server.close() };
}
