// rejoinder browser client: one call over /ws (protocol: server/PROTOCOL.md).
//
// Clocks: everything this page reports is on performance.now(). Capture times come from the
// capture worklet's sample clock anchored at the earliest arrival of its frames (a sample cannot
// have existed later than the moment it reached the page), minus the microphone's input latency
// when the browser reports it (MediaStreamTrack.stats.latency). Playback times are the context
// frames at which the playback worklet rendered a sample, mapped with getOutputTimestamp() to the
// moment the output device presents it. The server converts both to its call clock with the
// ping offset, so the waterfall below is measured where the caller sits.

const $ = (id) => document.getElementById(id);
const state = { status: "idle", callId: null, turns: {}, lines: [], errors: [], closed: null,
  stats: {}, sent: 0, received: 0, reports: [] };
window.rejoinder = state;

function setStatus(s) {
  state.status = s;
  $("status").textContent = s;
}

function tokenFromPage() {
  const m = location.hash.match(/token=([^&]+)/);
  return m ? decodeURIComponent(m[1]) : $("token").value.trim();
}

class Call {
  async start(token) {
    setStatus("starting");
    try {
      this.ctx = new AudioContext({ sampleRate: 16000, latencyHint: "interactive" });
    } catch (e) {
      this.ctx = new AudioContext({ latencyHint: "interactive" });
    }
    const ctx = this.ctx;
    await ctx.audioWorklet.addModule("/static/worklets.js");
    this.stream = await navigator.mediaDevices.getUserMedia({ audio: {
      echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 } });
    this.track = this.stream.getAudioTracks()[0];
    const src = ctx.createMediaStreamSource(this.stream);
    this.capture = new AudioWorkletNode(ctx, "rejoinder-capture",
      { processorOptions: { frame: Math.round(ctx.sampleRate / 50) } });
    this.player = new AudioWorkletNode(ctx, "rejoinder-playback",
      { outputChannelCount: [1], processorOptions: { prebufferMs: 60 } });
    src.connect(this.capture);
    this.capture.connect(ctx.destination); // outputs silence; keeps the node pulled
    this.player.connect(ctx.destination);
    if (ctx.state !== "running") await ctx.resume();
    this.capOffset = Infinity;
    this.inputLatencyMs = 0;
    this.ready = false;
    this.capture.port.onmessage = (e) => this.onCapture(e.data);
    this.player.port.onmessage = (e) => this.onPlayback(e.data);

    const proto = location.protocol === "https:" ? "wss" : "ws";
    this.ws = new WebSocket(`${proto}://${location.host}/ws`);
    this.ws.binaryType = "arraybuffer";
    this.ws.onopen = () => this.send({ type: "hello", token, sample_rate: ctx.sampleRate,
      client: navigator.userAgent.slice(0, 64), stats: this.audioStats() });
    this.ws.onmessage = (e) => this.onMessage(e.data);
    this.ws.onclose = (e) => this.onClose(e);
    this.statsTimer = setInterval(() => this.pollStats(), 1000);
  }

  send(obj) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(obj));
  }

  audioStats() {
    const ctx = this.ctx;
    return { output_latency_ms: (ctx.outputLatency || 0) * 1000, base_latency_ms: (ctx.baseLatency || 0) * 1000,
      input_latency_ms: this.inputLatencyMs || 0, context_rate: ctx.sampleRate };
  }

  pollStats() {
    const s = this.track && this.track.stats;
    if (s && typeof s.latency === "number") this.inputLatencyMs = s.latency;
    state.stats = this.audioStats();
    if (this.ready) this.send({ type: "stats", stats: state.stats });
  }

  // context sample frame → performance.now() ms at the output device
  frameToPerf(frame) {
    const sec = frame / this.ctx.sampleRate;
    const ts = this.ctx.getOutputTimestamp ? this.ctx.getOutputTimestamp() : null;
    if (ts && ts.performanceTime > 0 && ts.contextTime > 0) {
      return { t: ts.performanceTime + (sec - ts.contextTime) * 1000, estimated: false };
    }
    const lat = (this.ctx.outputLatency || 0) + (this.ctx.baseLatency || 0);
    return { t: performance.now() + (sec - this.ctx.currentTime + lat) * 1000, estimated: true };
  }

  onCapture({ frame, pcm }) {
    const now = performance.now();
    const sr = this.ctx.sampleRate;
    this.capOffset = Math.min(this.capOffset, now - ((frame + pcm.length) / sr) * 1000);
    if (!this.ready) return;
    const t = (frame / sr) * 1000 + this.capOffset - this.inputLatencyMs;
    const buf = new ArrayBuffer(8 + pcm.length * 2);
    new DataView(buf).setFloat64(0, t, true);
    new Int16Array(buf, 8).set(pcm);
    this.ws.send(buf);
    state.sent++;
  }

  onPlayback(m) {
    const { t, estimated } = this.frameToPerf(m.frame);
    const msg = { type: "played", turn_id: m.turn, event: m.ev, t, estimated,
      played_ms: (m.played / this.ctx.sampleRate) * 1000 };
    if (m.ev === "stall") msg.duration_ms = (m.frames / this.ctx.sampleRate) * 1000;
    state.reports.push(msg);
    this.send(msg);
  }

  onMessage(data) {
    if (data instanceof ArrayBuffer) {
      const v = new DataView(data);
      const turn = v.getUint32(0, true);
      const pcm = new Int16Array(data, 8);
      state.received++;
      this.player.port.postMessage({ type: "audio", turn, pcm }, [data]);
      return;
    }
    const m = JSON.parse(data);
    switch (m.type) {
      case "ping":
        this.send({ type: "pong", id: m.id, t: performance.now() });
        break;
      case "ready":
        this.ready = true;
        state.callId = m.call_id;
        setStatus(`in call ${m.call_id} (clock ±${m.clock_err_ms.toFixed(1)} ms)`);
        break;
      case "reply_end":
        this.player.port.postMessage({ type: "end", turn: m.turn_id });
        break;
      case "clear":
      case "pause":
      case "resume":
        this.player.port.postMessage({ type: m.type, turn: m.turn_id });
        break;
      case "transcript":
        ui.caller(m.turn_id, m.text, m.final);
        break;
      case "agent_text":
        ui.agent(m.turn_id, m.text, false, false);
        break;
      case "agent":
        ui.agent(m.turn_id, m.text, true, m.interrupted);
        break;
      case "tool":
        ui.tool(m.turn_id, m.name, m.args);
        break;
      case "turn":
        state.turns[m.turn_id] = m;
        ui.waterfall(m);
        break;
      case "error":
      case "notice":
        state.errors.push(m);
        ui.notice(m);
        break;
      case "transfer":  // the agent hands the caller to a person; the server closes next
        state.transfer = m;
        ui.notice({ type: "transfer", code: m.target || "", message: m.reason });
        break;
    }
  }

  onClose(e) {
    state.closed = { code: e.code, reason: e.reason };
    setStatus(`call ended (${e.code}${e.reason ? ": " + e.reason : ""})`);
    this.stop();
  }

  hangup() {
    this.send({ type: "bye" });
  }

  stop() {
    clearInterval(this.statsTimer);
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    if (this.ctx && this.ctx.state !== "closed") this.ctx.close();
    $("start").disabled = false;
    $("hangup").disabled = true;
  }
}

// --- page -------------------------------------------------------------------------------------
const SEGMENTS = ["endpointing", "transcription", "tools", "llm_ttft", "first_text", "tts_ttfb",
  "audio_out", "playout", "lead_silence"];

const ui = {
  line(key, who, text, cls) {
    let li = document.querySelector(`#lines li[data-key="${key}"]`);
    if (!li) {
      li = document.createElement("li");
      li.dataset.key = key;
      li.className = who;
      $("lines").appendChild(li);
    }
    li.textContent = `${who === "caller" ? "Caller" : "Agent"}: ${text}`;
    li.classList.toggle("interim", cls === "interim");
    li.classList.toggle("cut", cls === "cut");
    li.scrollIntoView({ block: "nearest" });
    state.lines = [...document.querySelectorAll("#lines li")].map((x) => x.textContent);
  },
  caller(turn, text, final) {
    this.line(`c${turn}`, "caller", text, final ? "" : "interim");
  },
  agentText: {},
  agent(turn, text, done, cut) {
    if (done) {
      this.line(`a${turn}`, "agent", (text || "…") + (cut ? " [cut]" : ""), cut ? "cut" : "");
    } else {
      this.agentText[turn] = (this.agentText[turn] || "") + text;
      this.line(`a${turn}`, "agent", this.agentText[turn], "interim");
    }
  },
  tool(turn, name, args) {
    const li = document.createElement("li");
    li.className = "tool";
    li.textContent = `tool: ${name}(${JSON.stringify(args)})`;
    $("lines").appendChild(li);
  },
  notice(m) {
    const p = document.createElement("p");
    p.className = "notice";
    p.textContent = `${m.type}: ${m.code || m.stage || ""} ${m.message}`;
    $("notices").appendChild(p);
  },
  waterfall(s) {
    let box = document.querySelector(`.turn[data-turn="${s.turn_id}"]`);
    if (!box) {
      box = document.createElement("div");
      box.className = "turn";
      box.dataset.turn = s.turn_id;
      $("turns").appendChild(box);
    }
    const v2v = s.v2v_ms;
    const head = v2v == null ? `no reply heard (${s.status})`
      : `${Math.round(v2v)} ms voice to voice · largest: ${s.largest_segment}`;
    const est = new Set(s.estimated || []);
    const scale = Math.max(1500, v2v || 0);
    let x = 0;
    const bars = SEGMENTS.filter((k) => k in (s.segments || {})).map((k) => {
      const w = s.segments[k];
      const bar = `<div class="seg seg-${k}" style="left:${(100 * x) / scale}%;width:${Math.max(0.3, (100 * w) / scale)}%"
        title="${k}: ${w.toFixed(0)} ms"><span>${k} ${w.toFixed(0)}</span></div>`;
      x += w;
      return bar;
    }).join("");
    const b = s.boundaries || {};
    const origin = b.user_speech_end;
    const marks = origin == null ? "" : Object.entries(b).filter(([, t]) => t >= origin && t - origin <= scale)
      .map(([k, t]) => `<div class="mark${est.has(k) ? " est" : ""}" style="left:${(100 * (t - origin)) / scale}%"
        title="${k} ${(t - origin).toFixed(0)} ms${est.has(k) ? " (estimated)" : ""}"></div>`).join("");
    const estNote = est.size ? `<div class="est-note">estimated: ${[...est].join(", ")}</div>` : "";
    box.innerHTML = `<div class="head">Turn ${s.turn_id} · ${s.status} · ${head}</div>
      <div class="said">“${s.transcript || ""}”</div>
      <div class="bars">${bars}${marks}</div>
      <div class="axis"><span>0</span><span>${Math.round(scale / 2)} ms</span><span>${Math.round(scale)} ms</span></div>
      ${estNote}`;
  },
};

let current = null;
async function begin() {
  $("start").disabled = true;
  $("hangup").disabled = false;
  current = new Call();
  try {
    await current.start(tokenFromPage());
  } catch (e) {
    state.errors.push({ type: "error", code: "client", message: String(e) });
    setStatus(`cannot start: ${e}`);
    current.stop();
  }
}

$("start").onclick = begin;
$("hangup").onclick = () => current && current.hangup();
if (new URLSearchParams(location.search).get("autostart") === "1") begin();
