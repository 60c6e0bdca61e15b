// transformers.js as its users run it: a text-to-text pipeline (summarization, translation,
// text2text-generation) over a repo on a Hub (the local one, in the tests), greedy. Prints the text.
//   node generate.mjs HUB_URL REPO REVISION TASK DTYPE "text" NEW_TOKENS
import { device } from './runtime.mjs';
import { env, pipeline } from '@huggingface/transformers';

const [host, repo, revision, task, dtype, text, newTokens] = process.argv.slice(2);
env.remoteHost = host.endsWith('/') ? host : `${host}/`;
env.allowLocalModels = false;
if (process.env.TRANSFORMERS_JS_CACHE) env.cacheDir = process.env.TRANSFORMERS_JS_CACHE;

const pipe = await pipeline(task, repo, { revision, dtype, ...device });
const [output] = await pipe(text, { max_new_tokens: Number(newTokens), do_sample: false, num_beams: 1 });
console.log(JSON.stringify(Object.values(output)[0]));
