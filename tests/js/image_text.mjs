// transformers.js's image-text-to-text model class (4.3.2 has no pipeline for the task) as its users
// run it, over a repo on a Hub (the local one, in the tests), greedy, fed ids and pixels the repo's
// Python processor made: transformers.js's LlavaProcessor counts one placeholder more per image than
// a "default"-strategy model has features. Prints the new token ids of each row as JSON.
//   node image_text.mjs HUB_URL REPO REVISION DTYPE INPUTS.json NEW_TOKENS
// (INPUTS.json: {"input_ids": …, "attention_mask": …, "pixel_values": {"dims", "data"}}, a file: a
// tiled image's pixels are longer than a command line)
import { readFileSync } from 'node:fs';
import { device } from './runtime.mjs';
import { env, AutoModelForImageTextToText, Tensor } from '@huggingface/transformers';

const [host, repo, revision, dtype, inputs, newTokens] = process.argv.slice(2);
env.remoteHost = host.endsWith('/') ? host : `${host}/`;
env.allowLocalModels = false;
if (process.env.TRANSFORMERS_JS_CACHE) env.cacheDir = process.env.TRANSFORMERS_JS_CACHE;

const { input_ids, attention_mask, pixel_values } = JSON.parse(readFileSync(inputs, 'utf8'));
const integers = (rows) => new Tensor('int64', BigInt64Array.from(rows.flat().map(BigInt)), [rows.length, rows[0].length]);
const model = await AutoModelForImageTextToText.from_pretrained(repo, { revision, dtype, ...device });
const output = await model.generate({
  input_ids: integers(input_ids),
  attention_mask: integers(attention_mask),
  pixel_values: new Tensor('float32', Float32Array.from(pixel_values.data), pixel_values.dims),
  max_new_tokens: Number(newTokens),
  do_sample: false,
});
console.log(JSON.stringify(output.tolist().map((row) => row.slice(input_ids[0].length).map(Number))));
