// The laboratory's page in a real headless Chromium (Debian's package),
// driven by playwright-core. Run by .ci/lab-browser-test, which builds and
// starts `cargo run -p throttle-fleet-suite --example lab` and sets LAB_URL; the screenshot goes to
// LAB_ARTIFACTS (default: target/lab-browser).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";

const BASE = process.env.LAB_URL ?? "http://127.0.0.1:3000";
const ARTIFACTS = process.env.LAB_ARTIFACTS ?? path.resolve("target/lab-browser");
const ALGORITHMS = [
  "fixed_window",
  "sliding_window_log",
  "sliding_window_counter",
  "token_bucket",
  "leaky_bucket",
];

let browser;

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
});

after(async () => {
  await browser?.close();
});

// A fresh page on the lab, with every console error, page error and failed
// request collected.
async function openLab() {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const problems = [];
  page.on("console", (m) => {
    if (m.type() === "error") problems.push(`console: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("requestfailed", (r) => problems.push(`request failed: ${r.url()}`));
  await page.goto(BASE + "/");
  await waitForLoads(page, 1);
  return { page, problems };
}

async function waitForLoads(page, n) {
  await page.waitForFunction((n) => Number(document.body.dataset.loads) >= n, n);
}

// Draws the whole timeline at once.
async function toEnd(page) {
  await page.click("#end");
  await page.waitForFunction(() => window.lab.playhead === window.lab.data.span_us);
}

// Pixels of the allowed and denied colours on each lane's canvas.
async function pixels(page) {
  return page.evaluate(() => {
    const out = {};
    for (const lane of document.querySelectorAll(".lane[data-algorithm]")) {
      const c = lane.querySelector("canvas");
      const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      let allowed = 0;
      let denied = 0;
      let other = 0;
      for (let i = 0; i < d.length; i += 4) {
        const [r, g, b] = [d[i], d[i + 1], d[i + 2]];
        if (r === 26 && g === 152 && b === 80) allowed++;
        else if (r === 215 && g === 48 && b === 39) denied++;
        else if (!(r === 247 && g === 247 && b === 247)) other++;
      }
      out[lane.dataset.algorithm] = { allowed, denied, other };
    }
    return out;
  });
}

async function canvasImages(page) {
  return page.evaluate(() =>
    [...document.querySelectorAll(".lane[data-algorithm] canvas")].map((c) => c.toDataURL()),
  );
}

// The page's summary figures next to the endpoint's for the same query.
async function assertSummariesMatchTheEndpoint(page) {
  const query = await page.evaluate(() => document.body.dataset.query);
  const response = await fetch(`${BASE}/api/simulate?${query}`);
  assert.equal(response.status, 200);
  const json = await response.json();
  const shown = await page.evaluate(() => {
    const out = {};
    for (const lane of document.querySelectorAll(".lane[data-algorithm]")) {
      const s = {};
      for (const dd of lane.querySelectorAll("dd[data-field]")) {
        s[dd.dataset.field] = { value: dd.dataset.value, text: dd.textContent };
      }
      out[lane.dataset.algorithm] = s;
    }
    return out;
  });
  assert.deepEqual(Object.keys(shown), ALGORITHMS);
  for (const alg of json.algorithms) {
    const s = alg.summary;
    const on = shown[alg.algorithm];
    assert.equal(on.admitted.text, String(s.admitted), `${alg.algorithm} admitted`);
    assert.equal(on.denied.text, String(s.denied), `${alg.algorithm} denied`);
    assert.equal(on.worst_window.text, `${s.worst_window} of ${s.limit}`, `${alg.algorithm} worst`);
    assert.equal(on.first_denial_us.value, String(s.first_denial_us), `${alg.algorithm} first denial`);
  }
  return json;
}

test("the page loads without console errors, draws every lane and saves a screenshot", async () => {
  const { page, problems } = await openLab();
  assert.equal(await page.isVisible("input[name=seed]"), false, "no seed for the edge burst");
  await toEnd(page);
  const px = await pixels(page);
  assert.deepEqual(Object.keys(px), ALGORITHMS);
  for (const alg of ALGORITHMS) {
    assert.ok(px[alg].allowed > 50, `${alg}: allowed bars drawn (${px[alg].allowed} px)`);
    assert.ok(px[alg].other > 500, `${alg}: lines and boundaries drawn (${px[alg].other} px)`);
  }
  // The boundary attack: the fixed window denies nothing, the others deny.
  assert.equal(px.fixed_window.denied, 0);
  for (const alg of ALGORITHMS.slice(1)) {
    assert.ok(px[alg].denied > 50, `${alg}: denied bars drawn (${px[alg].denied} px)`);
  }
  const json = await assertSummariesMatchTheEndpoint(page);
  assert.equal(json.pattern, "edge_burst");
  assert.equal(json.algorithms[0].summary.worst_window, 2 * json.quota.limit);
  mkdirSync(ARTIFACTS, { recursive: true });
  const shot = path.join(ARTIFACTS, "lab.png");
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`screenshot: ${shot}`);
  assert.deepEqual(problems, []);
  await page.close();
});

test("switching patterns redraws, and the numbers follow the endpoint", async () => {
  const { page, problems } = await openLab();
  await toEnd(page);
  let before = await canvasImages(page);
  let loads = 1;
  for (const pattern of ["bot_swarm", "steady", "custom", "edge_burst"]) {
    await page.selectOption("#pattern", pattern);
    await waitForLoads(page, ++loads);
    await toEnd(page);
    const now = await canvasImages(page);
    for (let k = 0; k < ALGORITHMS.length; k++) {
      assert.notEqual(now[k], before[k], `${pattern}: ${ALGORITHMS[k]} redrawn`);
    }
    before = now;
    const json = await assertSummariesMatchTheEndpoint(page);
    assert.equal(json.pattern, pattern);
    // Only the fields the pattern uses are on show.
    const seeded = pattern === "bot_swarm" || pattern === "custom";
    assert.equal(await page.isVisible("input[name=seed]"), seeded, `${pattern}: seed`);
    assert.equal(await page.isVisible("input[name=rate]"), pattern === "custom", `${pattern}: rate`);
    const px = await pixels(page);
    if (pattern === "bot_swarm") {
      // Far above the quota: every algorithm denies, visibly.
      for (const alg of ALGORITHMS) assert.ok(px[alg].denied > 50, `${alg} denies the swarm`);
    }
    if (pattern === "steady") {
      // At the quota's rate: only the counter's estimate denies (one request).
      assert.equal(px.fixed_window.denied, 0);
      assert.equal(px.token_bucket.denied, 0);
      assert.equal(json.algorithms[2].summary.denied, 1);
    }
  }
  assert.deepEqual(problems, []);
  await page.close();
});

test("playback plays at the chosen speed, steps request by request and pauses", async () => {
  const { page, problems } = await openLab();
  // Loading starts playback from 0.
  await page.selectOption("#speed", "10");
  await page.click("#restart");
  await page.waitForFunction(() => window.lab.playing && window.lab.playhead > 0);
  await page.click("#play"); // pause
  const held = await page.evaluate(
    () =>
      new Promise((resolve) => {
        const at = window.lab.playhead;
        requestAnimationFrame(() => requestAnimationFrame(() => resolve([at, window.lab.playhead])));
      }),
  );
  assert.equal(held[1], held[0], "paused: the playhead stays");
  // Step: each step lands on the next request's time, and stays paused.
  const at = await page.evaluate(() => window.lab.data.at_us);
  let p = await page.evaluate(() => window.lab.playhead);
  for (let k = 1; k <= 3; k++) {
    await page.click("#step");
    const next = at.find((t) => t > p);
    p = await page.evaluate(() => window.lab.playhead);
    assert.equal(p, next, `step ${k}`);
    assert.equal(await page.evaluate(() => window.lab.playing), false);
  }
  const clock = await page.textContent("#clock");
  assert.match(clock, /^\d+(\.\d+)? s$/);
  assert.deepEqual(problems, []);
  await page.close();
});

test("a bad parameter shows the server's message naming the field", async () => {
  const { page, problems } = await openLab();
  await page.fill("input[name=limit]", "0");
  await page.dispatchEvent("input[name=limit]", "change");
  await page.waitForSelector("#error:not([hidden])");
  const message = await page.textContent("#error");
  assert.match(message, /^limit: /);
  assert.equal(await page.getAttribute("input[name=limit]", "aria-invalid"), "true");
  // The last good timeline stays on screen.
  assert.equal(await page.evaluate(() => document.body.dataset.loads), "1");
  // The endpoint says the same, with a 400.
  const response = await fetch(`${BASE}/api/simulate?limit=0`);
  assert.equal(response.status, 400);
  assert.equal((await response.json()).field, "limit");
  // Bounded: a steady 10,000 per period would be 30,000 requests.
  const big = await fetch(`${BASE}/api/simulate?pattern=steady&limit=10000`);
  assert.equal(big.status, 400);
  assert.match((await big.json()).error, /at most 20000/);
  // The browser reports the 400 itself; nothing else went wrong.
  assert.deepEqual(
    problems.filter((p) => !p.includes("status of 400")),
    [],
  );
  await page.close();
});
