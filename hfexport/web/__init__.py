"""The web runtimes transformers.js users run a published ONNX file on: onnxruntime-web's wasm
backend, run under node (`wasm`), and its WebGPU provider's placement, read in headless Chromium
(`webgpu`)."""
