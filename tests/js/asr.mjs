// transformers.js's automatic-speech-recognition pipeline as its users run it, over a repo on a Hub
// (the local one, in the tests), greedy, fed a waveform (a JSON file of samples at the repo's
// sampling rate). Prints the text as JSON.
//   node asr.mjs HUB_URL REPO REVISION DTYPE AUDIO_JSON NEW_TOKENS
import { readFileSync } from 'node:fs';
import { device } from './runtime.mjs';
import { env, pipeline } from '@huggingface/transformers';

const [host, repo, revision, dtype, audio, newTokens] = process.argv.slice(2);
env.remoteHost = host.endsWith('/') ? host : `${host}/`;
env.allowLocalModels = false;
if (process.env.TRANSFORMERS_JS_CACHE) env.cacheDir = process.env.TRANSFORMERS_JS_CACHE;

const pipe = await pipeline('automatic-speech-recognition', repo, { revision, dtype, ...device });
const samples = Float32Array.from(JSON.parse(readFileSync(audio, 'utf8')));
const output = await pipe(samples, { max_new_tokens: Number(newTokens), do_sample: false, num_beams: 1 });
console.log(JSON.stringify(output.text));
