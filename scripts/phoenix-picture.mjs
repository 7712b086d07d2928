// Phoenix's trace view of one span, with its attributes open, as a PNG (headless Chromium
// driven by playwright-core). Used by scripts/e2e-real-hosts.sh when E2E_PHOENIX is set and
// playwright-core is installed (scripts/phoenix-real-claude.sh installs it beside the venv).
//
//   node scripts/phoenix-picture.mjs URL OUT.png [FILTER [CHROMIUM]]
//
// URL is Phoenix's trace page with `selectedSpanNodeId`; the page is a JavaScript app, so
// this waits for the span tree to render, opens the selected span's Attributes tab (its
// attributes filtered to those matching FILTER, when given), and takes the picture at
// 1400x900. NODE_PATH names the node_modules holding playwright-core.
import { createRequire } from "node:module";

const require = createRequire(`${process.env.NODE_PATH ?? "."}/`);
const { chromium } = require("playwright-core");
const [url, out, filter = "", executablePath = "/usr/bin/chromium"] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath,
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.goto(url, { waitUntil: "networkidle", timeout: 120000 });
  // The selected span's details (its tabs) show once the trace has rendered.
  const attributes = page.getByRole("tab", { name: /Attributes/ }).first();
  await attributes.waitFor({ timeout: 120000 });
  await attributes.click();
  // Only windowtap's own attributes: the attribution (decision, evidence, window) fits.
  if (filter) {
    await page.getByRole("button", { name: "Search JSON keys and values" }).click();
    await page.keyboard.type(filter);
  }
  await page.waitForTimeout(1500);
  await page.screenshot({ path: out });
} finally {
  await browser.close();
}
