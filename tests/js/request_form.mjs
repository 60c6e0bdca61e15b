// The service's request page as its users drive it: headless Chromium fills the form at
// SERVICE/request and submits it, then follows the request's page (it reloads itself) until the
// job ends. Prints, as JSON on the last line, the page's URL, state, outcome, fix and link, what it
// says it made, and every progress line it showed on the way; saves a screenshot at each step:
// SCREENSHOT with "-asked" (the form filled), "-waiting" (the first progress seen), and the
// end (SCREENSHOT itself).
//   node request_form.mjs CHROMIUM SERVICE_URL FIELDS_JSON SCREENSHOT [TIMEOUT_S]
// FIELDS_JSON: {"repo": "org/model", "into": "me/model-ONNX" (or absent: a PR), "token": "hf_…",
// "uncheck": ["executorch"]}; with "sign_in": "hf_…" instead of "token", the page's "Sign in with
// Hugging Face" is followed to the Hub's authorize page, which that token approves.
import { chromium } from 'playwright-core';

const [executablePath, service, fieldsJson, screenshot, timeoutS = '600'] = process.argv.slice(2);
const fields = JSON.parse(fieldsJson);
const browser = await chromium.launch({
  executablePath,
  args: ['--no-sandbox', '--no-first-run', '--disable-background-networking', '--disable-component-update'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  await page.goto(`${service}/request`);
  let signedIn = null;
  if (fields.sign_in) {
    await Promise.all([page.waitForNavigation(), page.click('#sign-in')]);
    await page.fill('#hub-token', fields.sign_in);  // the Hub's own page: who approves the app
    await Promise.all([page.waitForNavigation({ url: `${service}/request` }), page.click('#authorize')]);
    signedIn = await page.textContent('#signed-in');
  }
  await page.fill('#repo', fields.repo);
  for (const name of fields.uncheck ?? []) await page.uncheck(`input[name=backends][value="${name}"]`);
  if (fields.into !== undefined) {
    await page.check('input[name=destination][value=repo]');
    await page.fill('#into', fields.into);
  }
  if (fields.token) await page.fill('#token', fields.token);
  await page.screenshot({ path: screenshot.replace(/\.png$/, '-asked.png'), fullPage: true });
  const [answer] = await Promise.all([page.waitForNavigation(), page.click('button[type=submit]')]);
  let result;
  if (answer.status() !== 200) {  // refused: the form again, with what was wrong
    result = { url: page.url(), status: answer.status(), error: await page.textContent('.error') };
  } else {
    // The request's page reloads itself every few seconds until the job ends: each progress line
    // it shows on the way is kept (a read during a reload is tried again).
    const seen = [];
    const deadline = Date.now() + Number(timeoutS) * 1000;
    for (;;) {
      try {
        if (await page.$('#outcome')) break;
        const progress = await page.$('#progress');
        const text = progress ? (await progress.textContent()).trim() : null;
        if (text && !seen.includes(text)) {
          if (!seen.length) await page.screenshot({ path: screenshot.replace(/\.png$/, '-waiting.png'), fullPage: true });
          seen.push(text);
        }
      } catch (e) { /* the page reloaded under the read */ }
      if (Date.now() > deadline) throw new Error(`no outcome after ${timeoutS} s; saw ${JSON.stringify(seen)}`);
      await page.waitForTimeout(300);
    }
    result = {
      url: page.url(),
      status: answer.status(),
      state: await page.textContent('#state'),
      outcome: await page.textContent('#outcome'),
      fix: await (await page.$('#fix'))?.textContent() ?? null,
      link: await (await page.$('#link'))?.getAttribute('href') ?? null,
      made: await page.$$eval('#made li', (items) => items.map((li) => li.textContent)),
      seen,
    };
  }
  result.signed_in = signedIn;
  result.token_shown = (await page.content()).includes(fields.token ?? fields.sign_in);
  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(JSON.stringify(result));
} finally {
  await browser.close();
}
