// Drives the transfer service's dashboard in Debian's headless Chromium through Playwright
// (playwright-core, no bundled browser). Called by the transfer_service tests with:
//   FERRY_URL, FERRY_TOKEN, FERRY_JOB, FERRY_SHOTS (a directory), PLAYWRIGHT (its module dir).
// Exits 0 when the page showed the job ACTIVE and then FINISHED, live, with its link and plot.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.PLAYWRIGHT, "index.js"));
const { chromium } = require(path.join(process.env.PLAYWRIGHT, "node_modules", "playwright-core"));

const { FERRY_URL: url, FERRY_TOKEN: token, FERRY_JOB: job, FERRY_SHOTS: shots } = process.env;
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         // The service's certificate comes from the test's own CA.
         "--ignore-certificate-errors"],
});
let failed = false;
try {
  const page = await browser.newPage({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await page.goto(`${url}/dashboard#token=${encodeURIComponent(token)}`);
  const row = (state) => `#jobs tr[data-job-id="${job}"][data-state="${state}"]`;
  await page.waitForSelector(row("ACTIVE"), { timeout: 60_000 });
  await page.waitForSelector("#status.live", { timeout: 10_000 });
  if (page.url().includes("token=")) throw new Error("the token stayed in the address bar");
  await page.screenshot({ path: path.join(shots, "dashboard-active.png"), fullPage: true });
  await page.waitForSelector(row("FINISHED"), { timeout: 180_000 });
  // The last seconds of the transfer are on the plot; the link row counts the finished file.
  await page.waitForSelector("#plot polyline", { timeout: 10_000 });
  const link = await page.textContent("#links tbody tr");
  if (!/gsiftp:\/\/localhost:\d+ → gsiftp:\/\/localhost:\d+/.test(link)) throw new Error(`no link row: ${link}`);
  const file = await page.textContent(`#files tr[data-state="FINISHED"]`);
  if (!file.includes("MiB")) throw new Error(`the file row shows no size: ${file}`);
  await page.screenshot({ path: path.join(shots, "dashboard-finished.png"), fullPage: true });
  if (errors.length) throw new Error(`errors in the page: ${errors.join("; ")}`);
  console.log("dashboard: ACTIVE then FINISHED shown live; screenshots in " + shots);
} catch (e) {
  failed = true;
  console.error("dashboard check failed: " + (e && e.stack || e));
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
