// Chat page for `redrafter serve`: streams answers and colours each token by where it came from.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORE = "redrafter-api-key";

let info = null;        // /redrafter/info, once loaded
let turns = [];         // user/assistant messages; the system prompt is prepended at send time
let controller = null;  // AbortController of the answer being streamed, if any

// ---- helpers ---------------------------------------------------------------

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;  // never innerHTML: model text is untrusted
  return node;
}

const fixed = (x, digits) => (typeof x === "number" && isFinite(x) ? x.toFixed(digits) : "–");
const times = (x) => (typeof x === "number" && isFinite(x) ? `${x.toFixed(2)}x` : "–");

function headers(json) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  const key = sessionStorage.getItem(KEY_STORE);
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

// One shared prompt, so that several requests failing with 401 at once ask only once.
let keyPrompt = null;
function askKey(rejected) {
  if (keyPrompt) return keyPrompt;
  const form = $("key-form");
  $("key-note").textContent = rejected ? "that key was rejected" : "this server needs a key";
  form.hidden = false;
  $("api-key").focus();
  keyPrompt = new Promise((resolve) => {
    form.onsubmit = (event) => {
      event.preventDefault();
      sessionStorage.setItem(KEY_STORE, $("api-key").value.trim());
      form.hidden = true;
      keyPrompt = null;
      resolve();
    };
  });
  return keyPrompt;
}

// fetch with the API key; on 401 ask for a key and try again.
async function api(url, options = {}) {
  const json = typeof options.body === "string";
  for (;;) {
    const hadKey = Boolean(sessionStorage.getItem(KEY_STORE));
    const response = await fetch(url, { ...options, headers: headers(json) });
    if (response.status !== 401) return response;
    // Stop must still work while the key form waits.
    const signal = options.signal;
    const stopped = signal ? new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true })) : null;
    await Promise.race([askKey(hadKey), stopped].filter(Boolean));
    if (signal && signal.aborted) throw new DOMException("stopped", "AbortError");
  }
}

async function errorMessage(response) {
  const text = await response.text();
  try {
    return JSON.parse(text).error.message;
  } catch {
    return `HTTP ${response.status} ${response.statusText}${text ? `: ${text.slice(0, 200)}` : ""}`;
  }
}

async function getJson(url) {
  const response = await api(url);
  if (!response.ok) throw new Error(await errorMessage(response));
  return response.json();
}

// ---- header and settings ---------------------------------------------------

function treeText(tree, adaptive) {
  if (!tree) return "plain decoding (no drafter)";
  let text = `tree W=${tree.beam_width} L=${tree.beam_length} S=${tree.search_width}`;
  if (tree.node_budget != null) text += ` N=${tree.node_budget}`;
  return text + (adaptive ? ", adaptive: each step drafts the fastest tree for the batch, or none" : ", fixed");
}

async function loadInfo() {
  try {
    info = await getJson("/redrafter/info");
    $("model").textContent = info.model;
    $("drafter").textContent = `drafter: ${info.drafter}`;
    let text = treeText(info.tree, info.adaptive);
    if (info.context_length) text += ` · context ${info.context_length} tokens`;
    $("tree").textContent = text;
    // The tree is shared by the whole batch, so it is shown, not edited.
    const defaults = info.defaults || {};
    if (defaults.temperature != null) $("temperature").value = defaults.temperature;
    if (defaults.max_tokens != null) $("max_tokens").value = defaults.max_tokens;
  } catch (error) {
    // Another OpenAI-style server: chat still works with its first model.
    $("model").textContent = "no /redrafter/info";
    $("tree").textContent = error.message;
    try {
      info = { model: (await getJson("/v1/models")).data[0].id };
      $("model").textContent = info.model;
    } catch {
      info = { model: "default" };
    }
  }
}

function sampling() {
  const number = (id, fallback) => {
    const value = $(id).value.trim();
    return value === "" ? fallback : Number(value);
  };
  const body = {
    temperature: number("temperature", 0),
    top_p: number("top_p", 1),
    max_tokens: Math.round(number("max_tokens", 512)),
  };
  if ($("seed").value.trim() !== "") body.seed = Math.round(number("seed", 0));
  return body;
}

// ---- conversation ------------------------------------------------------------

// Follow the newest token only when the reader is already at the bottom.
function stickToBottom(update) {
  const box = $("messages");
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  update();
  if (atBottom) box.scrollTop = box.scrollHeight;
}

function addMessage(role, text) {
  const message = el("div", `message ${role}`);
  message.append(el("div", "content", text));
  stickToBottom(() => $("messages").append(message));
  return message;
}

function tokenSpan(token) {
  const span = el("span", "tok", token.text);
  if (token.source === "draft") span.classList.add("tok-draft", `d${Math.min(Math.max(token.depth | 0, 1), 8)}`);
  else if (token.source === "lookup") span.classList.add("tok-lookup");
  else if (token.source === "llm") span.classList.add("tok-llm");
  return span;
}

function liveText(figures) {
  return `tokens/step ${fixed(figures.tokens_per_step, 2)} · ${fixed(figures.tokens_per_s, 1)} tokens/s · ${times(figures.speedup)} plain`;
}

function statsText(state) {
  const { usage, final, last } = state;
  const parts = [`${usage ? usage.completion_tokens : state.tokens} tokens`];
  if (last || final) {
    parts.push(`${fixed((final || last).tokens_per_step, 2)} tokens/step`);
    parts.push(`${fixed(last && last.tokens_per_s, 1)} tokens/s`);
    parts.push(`speed-up ${times(last && last.speedup)}`);
  }
  const cached = usage && usage.prompt_tokens_details && usage.prompt_tokens_details.cached_tokens;
  if (usage) parts.push(`${cached || 0} of ${usage.prompt_tokens} prompt tokens cached`);
  if (final && final.drafted) parts.push(`accepted ${final.accepted}/${final.drafted} drafted`);
  const byDepth = (final && final.acceptance_by_depth) || [];
  if (byDepth.length) parts.push("acceptance " + byDepth.map((p, i) => `≥${i + 1}: ${Math.round(p * 100)}%`).join(" "));
  if (state.finish) parts.push(`finish: ${state.finish}`);
  return parts.join(" · ");
}

// Applies one streamed chunk to the answer; returns an error message, if the chunk is one.
function applyChunk(chunk, state) {
  if (chunk.error) return chunk.error.message || "error";
  const choice = (chunk.choices || [])[0];
  const extra = chunk.redrafter;
  if (choice) {
    const text = choice.delta && choice.delta.content;
    if (text) {
      state.text += text;
      const spans = extra && Array.isArray(extra.tokens)
        ? extra.tokens.map(tokenSpan)
        : [el("span", "tok", text)];  // another server: uncoloured
      state.tokens += extra && extra.tokens ? extra.tokens.length : 1;
      stickToBottom(() => state.content.append(...spans));
    }
    if (choice.finish_reason) state.finish = choice.finish_reason;
    if (extra && "tokens_per_s" in extra) {
      state.last = extra;
      $("live").textContent = liveText(extra);
    }
  }
  if (chunk.usage) state.usage = chunk.usage;
  if (extra && "steps" in extra) state.final = extra;
  return null;
}

// Reads the server-sent events; stops at [DONE] or the end of the body.
async function readStream(response, state) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let match;
      while ((match = /\r?\n\r?\n/.exec(buffer))) {
        const event = buffer.slice(0, match.index);
        buffer = buffer.slice(match.index + match[0].length);
        for (const line of event.split(/\r?\n/)) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") return;
          const error = applyChunk(JSON.parse(data), state);
          if (error) throw new Error(error);
        }
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

async function send() {
  const text = $("prompt").value.trim();
  if (!text || controller) return;
  controller = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  $("prompt").value = "";
  const history = turns;  // "New chat" swaps in a new list; this answer must not leak into it
  const userTurn = { role: "user", content: text };
  history.push(userTurn);
  addMessage("user", text);
  const message = addMessage("assistant", "");
  const state = { content: message.querySelector(".content"), text: "", tokens: 0 };
  let failure = null;
  try {
    await ready;
    const system = $("system").value.trim();
    const messages = system ? [{ role: "system", content: system }, ...history] : [...history];
    const body = {
      model: info.model, messages, stream: true, stream_options: { include_usage: true }, ...sampling(),
    };
    const response = await api("/v1/chat/completions", {
      method: "POST", body: JSON.stringify(body), signal: controller.signal,
    });
    if (!response.ok) throw new Error(await errorMessage(response));
    await readStream(response, state);
  } catch (error) {
    if (error.name === "AbortError") state.finish = "stopped";
    else failure = error.message;
  }
  // Keep whatever arrived, even a stopped answer, so the next turn sees it.
  if (state.text) history.push({ role: "assistant", content: state.text });
  else if (failure && history[history.length - 1] === userTurn) {
    history.pop();  // nothing answered: drop the turn and give the text back for a retry
    if (!$("prompt").value) $("prompt").value = text;
  }
  if (failure) message.append(el("div", "error", `error: ${failure}`));
  if (state.tokens || state.usage || state.finish) message.append(el("div", "stats", statsText(state)));
  message.dataset.done = "true";
  stickToBottom(() => {});
  controller = null;
  $("send").disabled = false;
  $("stop").disabled = true;
}

function reset() {
  if (controller) controller.abort();
  turns = [];
  $("messages").replaceChildren();
  $("live").textContent = "";
  $("prompt").focus();
}

// ---- tuning panel ----------------------------------------------------------

function table(columns, rows, caption) {
  const t = el("table");
  if (caption) t.append(el("caption", "", caption));
  const head = el("tr");
  for (const column of columns) head.append(el("th", "", column));
  t.append(head);
  for (const row of rows) t.append(row);
  return t;
}

function row(cells, className) {
  const tr = el("tr", className);
  for (const cell of cells) tr.append(el("td", "", cell == null ? "–" : String(cell)));
  return tr;
}

function calibrationTable(c) {
  const same = (s, chosen) => chosen && ["beam_width", "beam_length", "search_width"].every((k) => s[k] === chosen[k])
    && (chosen.node_budget == null || s.node_budget === chosen.node_budget);
  const shapes = [...(c.shapes || [])].sort((a, b) => (b.speedup || 0) - (a.speedup || 0));
  const rows = shapes.map((s) => row(
    [s.beam_width, s.beam_length, s.search_width, s.node_budget, fixed(s.tokens_per_step, 2),
      fixed(s.draft_ms, 1), fixed(s.step_ms, 1), times(s.speedup)],
    same(s, c.chosen) ? "chosen" : ""));
  const caption = `${c.device} · ${c.dtype} · plain ${fixed(c.ar_ms, 1)} ms/token, overhead ${fixed(c.overhead_ms, 1)} ms`
    + (c.chosen ? " · highlighted: the served tree" : " · the served tree is not among these");
  return table(["W", "L", "S", "N", "tokens/step", "draft ms", "step ms", "speed-up"], rows, caption);
}

// <img src> cannot send the Authorization header, so images go through fetch and a blob URL.
async function loadImage(image, holder) {
  const img = el("img");
  img.alt = image.name;
  holder.append(img);
  try {
    const response = await api(image.url);
    if (!response.ok) throw new Error(await errorMessage(response));
    img.src = URL.createObjectURL(await response.blob());
  } catch (error) {
    img.replaceWith(el("span", "error", `${image.name}: ${error.message}`));
  }
}

async function loadTuning() {
  const body = $("tuning-body");
  try {
    const tuning = await getJson("/redrafter/tuning");
    body.className = "";
    body.replaceChildren(el("h3", "", "Calibration"));
    if (tuning.calibration) body.append(calibrationTable(tuning.calibration));
    else body.append(el("p", "muted", "no calibration: run `redrafter tune`"));
    for (const sweep of tuning.sweeps || []) {
      body.append(el("h3", "", sweep.name));
      const images = el("div", "images");
      body.append(images);
      (sweep.images || []).forEach((image) => loadImage(image, images));
      const rows = sweep.rows || [];
      if (rows.length) {
        const columns = Object.keys(rows[0]);
        body.append(table(columns, rows.map((r) => row(columns.map((c) => r[c])))));
      }
    }
  } catch (error) {
    body.replaceChildren(el("span", "error", `tuning unavailable: ${error.message}`));
  }
}

// ---- wiring ------------------------------------------------------------------

$("composer").addEventListener("submit", (event) => { event.preventDefault(); send(); });
$("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  }
});
$("stop").addEventListener("click", () => controller && controller.abort());
$("reset").addEventListener("click", reset);

// Info first, then tuning, so that a 401 asks for the key only once.
const ready = loadInfo();
ready.then(loadTuning);
$("prompt").focus();
