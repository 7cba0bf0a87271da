// dashboard_test.mjs - coli serve's dashboard in a real browser: headless
// chromium driven by puppeteer-core (tests/test_serve_dashboard.c runs it).
// usage: node dashboard_test.mjs CHROMIUM BASE_URL N_WORKERS SCREENSHOT_PATH
// Checks: the page loads without console errors or failed requests, a row per
// worker; then one completion, during which the worker the caller armed with
// COLI_FAULT crashes, and the fallback must appear on the page within seconds.
import puppeteer from "puppeteer-core";

const [chromium, base, nWorkersArg, shot] = process.argv.slice(2);
const nWorkers = Number(nWorkersArg);
const problems = [];
const browser = await puppeteer.launch({
  executablePath: chromium, headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
let failed = false;
function check(ok, what) {
  console.log((ok ? "ok   " : "FAIL ") + what);
  if (!ok) failed = true;
}
try {
  const page = await browser.newPage();
  await page.setViewport({width: 900, height: 1000});
  page.on("console", m => { if (m.type() === "error" || m.type() === "warn") problems.push(m.type() + ": " + m.text()); });
  page.on("pageerror", e => problems.push("page error: " + e.message));
  page.on("requestfailed", r => problems.push("request failed: " + r.url()));
  page.on("response", r => { if (r.status() >= 400) problems.push("HTTP " + r.status() + ": " + r.url()); });
  const resp = await page.goto(base + "/", {waitUntil: "load", timeout: 20000});
  check(resp.status() === 200, "GET / answers 200 (got " + resp.status() + ")");
  await page.waitForFunction(n => document.querySelectorAll("#workers tbody tr").length === n, {timeout: 10000}, nWorkers)
    .catch(() => {});
  const devices = await page.$$eval("#workers tbody tr", trs => trs.map(tr => tr.children[1].textContent));
  check(devices.length === nWorkers, "a row per worker: " + JSON.stringify(devices));
  const fallbacksBefore = await page.$$eval("#fallbacks tbody tr", trs => trs.length);
  check(fallbacksBefore === 0, "no fallback before any request");
  const gen = await fetch(base + "/v1/completions", {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({prompt: "Once upon a time", max_tokens: 16, seed: 5})});
  check(gen.status === 200, "the completion survives the crash (HTTP " + gen.status + ")");
  const t0 = Date.now();
  const seen = await page.waitForFunction(() => [...document.querySelectorAll("#fallbacks tbody tr")]
      .some(tr => tr.children[1].textContent === "crash" && Number(tr.children[2].textContent) >= 1),
    {timeout: 5000}).then(() => true, () => false);
  console.log("fallback on the page " + (Date.now() - t0) + " ms after the completion returned");
  const fb = await page.$$eval("#fallbacks tbody tr", trs => trs.map(tr => [...tr.children].map(td => td.textContent)));
  check(seen, "the injected crash shows in the fallbacks table: " + JSON.stringify(fb));
  await page.waitForFunction(() => !document.getElementById("heat").hidden, {timeout: 5000}).catch(() => {});
  check(await page.$eval("#heat", c => !c.hidden), "the heat map is drawn (serve --heat)");
  if (shot) await page.screenshot({path: shot, fullPage: true});
  check(problems.length === 0, "no console errors or failed requests: " + JSON.stringify(problems));
} finally {
  await browser.close();
}
console.log(failed ? "some checks failed" : "all checks passed");
process.exit(failed ? 1 : 0);
