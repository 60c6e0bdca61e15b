// transformers.js as its users run it: a feature-extraction pipeline over a repo on a Hub (the
// local one, in the tests), mean-pooled and normalized. Prints the embeddings as JSON.
//   node embed.mjs HUB_URL REPO REVISION DTYPE '["text", ...]'
// DTYPE: a transformers.js dtype (`q8`), or the options picking the file as JSON (`{"dtype": "fp32",
// "model_file_name": "model_w8"}`).
import { device } from './runtime.mjs';
import { env, pipeline } from '@huggingface/transformers';

const [host, repo, revision, dtype, texts] = process.argv.slice(2);
env.remoteHost = host.endsWith('/') ? host : `${host}/`;
env.allowLocalModels = false;
if (process.env.TRANSFORMERS_JS_CACHE) env.cacheDir = process.env.TRANSFORMERS_JS_CACHE;

const file = dtype.startsWith('{') ? JSON.parse(dtype) : { dtype };
const extractor = await pipeline('feature-extraction', repo, { revision, ...file, ...device });
const output = await extractor(JSON.parse(texts), { pooling: 'mean', normalize: true });
console.log(JSON.stringify(output.tolist()));
