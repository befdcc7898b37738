// The playground at / (docs/serving.md): one static page compiled into the binary (no build
// step, no CDN). It streams /v1/chat/completions with logprobs and shows per token its logprob
// (tooltip and shade) and whether the drafter proposed it (accepted tokens highlighted), plus
// live tok/s.
#include "engine/server/server.h"

namespace lockstep::server {
namespace {

const char kIndex[] = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>lockstep playground</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:0;display:flex;height:100vh;color:#1d2433}
aside{width:250px;padding:12px;background:#f3f5f9;border-right:1px solid #d8dde6;overflow:auto}
aside label{display:block;margin:8px 0 2px;font-size:12px;color:#555}
aside input,aside select,aside textarea{width:100%;box-sizing:border-box}
main{flex:1;display:flex;flex-direction:column}
#log{flex:1;overflow:auto;padding:16px}
.msg{margin:0 0 12px;padding:8px 10px;border-radius:6px;white-space:pre-wrap}
.user{background:#e6eefc}.assistant{background:#fff;border:1px solid #e1e4ea}
.tok{border-radius:2px}.tok.accepted{background:#c8f0c8}.tok.rejected{background:#ffe0cc}
form{display:flex;gap:8px;padding:10px;border-top:1px solid #d8dde6}
#input{flex:1}#stats{font-size:12px;color:#555;padding:0 16px 6px}
.legend span{padding:0 4px;margin-right:4px}
</style></head><body>
<aside>
<b>lockstep</b> playground
<label for="model">model</label><select id="model"></select>
<label for="system">system</label><textarea id="system" rows="3"></textarea>
<label for="temperature">temperature</label><input id="temperature" type="number" step="0.1" min="0" max="2" value="0">
<label for="top_p">top_p</label><input id="top_p" type="number" step="0.05" min="0.05" max="1" value="1">
<label for="top_k">top_k (0 = off)</label><input id="top_k" type="number" min="0" value="0">
<label for="seed">seed</label><input id="seed" type="number" min="0" value="0">
<label for="max_tokens">max_tokens</label><input id="max_tokens" type="number" min="1" value="128">
<label for="key">API key (if the server has one)</label><input id="key" type="password">
<p class="legend"><span class="tok accepted">drafted, accepted</span><span class="tok rejected">drafted, replaced</span></p>
<p style="font-size:12px;color:#555">Hover a token for its logprob; darker = less likely.</p>
</aside>
<main><div id="log"></div><div id="stats"></div>
<form id="form"><input id="input" placeholder="Message" autocomplete="off"><button id="send">Send</button></form></main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const history = [];
function headers() {
  const h = {"Content-Type": "application/json"};
  if ($("key").value) h["Authorization"] = "Bearer " + $("key").value;
  return h;
}
async function loadModels() {
  const r = await fetch("/v1/models", {headers: headers()});
  if (!r.ok) { $("stats").textContent = "GET /v1/models: HTTP " + r.status; return; }
  const j = await r.json();
  $("model").innerHTML = "";
  for (const m of j.data) {
    const o = document.createElement("option");
    o.value = m.id; o.textContent = m.id + (m.lockstep && m.lockstep.draft !== "none" ? " (draft: " + m.lockstep.draft + ")" : "");
    $("model").appendChild(o);
  }
}
function bubble(role, text) {
  const d = document.createElement("div");
  d.className = "msg " + role;
  d.textContent = text;
  $("log").appendChild(d);
  return d;
}
function addToken(div, e) {
  const s = document.createElement("span");
  s.className = "tok" + (e.drafted ? (e.accepted ? " accepted" : " rejected") : "");
  s.textContent = e.token;
  const p = Math.exp(e.logprob);
  s.title = "logprob " + e.logprob.toFixed(4) + " (p = " + p.toFixed(3) + ")" + (e.drafted ? (e.accepted ? ", drafted and accepted" : ", drafted, replaced") : "");
  if (!e.drafted) s.style.background = "rgba(255,160,0," + (0.45 * (1 - p)).toFixed(3) + ")";
  div.appendChild(s);
}
async function send(text) {
  history.push({role: "user", content: text});
  bubble("user", text);
  const out = bubble("assistant", "");
  out.dataset.done = "0";
  const msgs = [];
  if ($("system").value) msgs.push({role: "system", content: $("system").value});
  const body = {model: $("model").value, messages: msgs.concat(history), stream: true,
    logprobs: true, top_logprobs: 1, temperature: +$("temperature").value, top_p: +$("top_p").value,
    top_k: +$("top_k").value, seed: +$("seed").value, max_tokens: +$("max_tokens").value};
  const t0 = performance.now();
  let n = 0, reply = "", tFirst = 0, buf = "";
  const r = await fetch("/v1/chat/completions", {method: "POST", headers: headers(), body: JSON.stringify(body)});
  if (!r.ok) { out.textContent = "error: " + (await r.text()); history.pop(); return; }
  const reader = r.body.getReader(), dec = new TextDecoder();
  while (true) {
    const {done, value} = await reader.read();
    if (done) break;
    buf += dec.decode(value, {stream: true});
    let k;
    while ((k = buf.indexOf("\n\n")) >= 0) {
      const line = buf.slice(0, k); buf = buf.slice(k + 2);
      if (!line.startsWith("data: ")) continue;
      const data = line.slice(6);
      if (data === "[DONE]") continue;
      const j = JSON.parse(data);
      if (j.error) { out.appendChild(document.createTextNode(" [error: " + j.error.message + "]")); continue; }
      const c = j.choices[0];
      if (!c) continue;
      if (c.delta && c.delta.content) reply += c.delta.content;
      if (c.logprobs && c.logprobs.content) {
        for (const e of c.logprobs.content) { addToken(out, e); n++; if (!tFirst) tFirst = performance.now(); }
      }
      const secs = (performance.now() - (tFirst || t0)) / 1000;
      $("stats").textContent = n + " tokens, " + (n > 1 && secs > 0 ? ((n - 1) / secs).toFixed(1) : "-") + " tok/s" +
        (tFirst ? ", first token after " + ((tFirst - t0) / 1000).toFixed(2) + " s" : "") + (c.finish_reason ? ", finish: " + c.finish_reason : "");
      $("log").scrollTop = $("log").scrollHeight;
    }
  }
  out.dataset.done = "1";
  history.push({role: "assistant", content: reply});
}
$("form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const t = $("input").value.trim();
  if (!t) return;
  $("input").value = "";
  send(t).catch((e) => { $("stats").textContent = "error: " + e; });
});
// /?q=TEXT sends TEXT once the models are listed (the headless page test uses it).
const q = new URLSearchParams(location.search).get("q");
loadModels().then(() => q ? send(q) : null).catch((e) => { $("stats").textContent = "error: " + e; });
</script></body></html>
)HTML";

}  // namespace

const std::vector<StaticFile>& PlaygroundFiles() {
  static const std::vector<StaticFile> files = {
      {"/", "text/html; charset=utf-8", kIndex},
      {"/index.html", "text/html; charset=utf-8", kIndex},
  };
  return files;
}

}  // namespace lockstep::server
