// rejoinder audio worklets: microphone capture and agent playback with a jitter buffer.
// Both run on the audio rendering thread; every moment they report is a sample-frame index on
// the AudioContext clock (currentFrame + offset), which the page converts to performance.now().

const VOICED = 328 / 32768; // the same "first voiced sample" level as the server (≈ -40 dBFS)

// Capture: re-blocks the microphone into 20 ms Int16 frames, each tagged with the context frame
// of its first sample.
class Capture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.size = options.processorOptions.frame;
    this.buf = new Int16Array(this.size);
    this.fill = 0;
    this.first = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || !input[0]) return true;
    const ch = input[0];
    for (let i = 0; i < ch.length; i++) {
      if (this.fill === 0) this.first = currentFrame + i;
      const s = Math.max(-1, Math.min(1, ch[i]));
      this.buf[this.fill++] = s < 0 ? s * 32768 : s * 32767;
      if (this.fill === this.size) {
        this.port.postMessage({ frame: this.first, pcm: this.buf }, [this.buf.buffer]);
        this.buf = new Int16Array(this.size);
        this.fill = 0;
      }
    }
    return true;
  }
}

// Playback: a queue of 16 kHz frames for the current reply, started once `prebuffer` samples
// are queued (or the reply has ended), resampled to the context rate by linear interpolation.
// Reports: start (first voiced sample), end (after the last sample), cut (clear while playing),
// stall (the buffer ran dry mid-reply; it refills to the prebuffer before playing on).
class Playback extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.ratio = 16000 / sampleRate;
    this.prebuffer = Math.round((options.processorOptions.prebufferMs || 60) * 16);
    this.dead = 0; // replies with an id ≤ dead are finished or cleared: their audio is dropped
    this.paused = false;
    this.reset(0);
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  reset(turn) {
    this.turn = turn;
    this.q = [];
    this.qlen = 0;
    this.head = null;
    this.hp = 0;
    this.a = 0;
    this.b = 0;
    this.frac = 1;
    this.playing = false;
    this.ended = false;
    this.started = false;
    this.played = 0;
    this.stallAt = null;
  }

  report(ev, frame, extra) {
    this.port.postMessage(Object.assign({ ev, turn: this.turn, frame, played: this.played }, extra || {}));
  }

  onMessage(m) {
    if (m.type === "audio") {
      if (m.turn <= this.dead) return;
      if (m.turn !== this.turn) {
        if (this.turn && this.played) this.report("end", currentFrame);
        this.dead = Math.max(this.dead, this.turn);
        this.reset(m.turn);
      }
      const f = new Float32Array(m.pcm.length);
      for (let i = 0; i < f.length; i++) f[i] = m.pcm[i] / 32768;
      this.q.push(f);
      this.qlen += f.length;
    } else if (m.type === "end") {
      if (m.turn === this.turn) this.ended = true;
      else this.dead = Math.max(this.dead, m.turn);
    } else if (m.type === "clear") {
      if (m.turn === this.turn && this.turn) {
        if (this.played) this.report("cut", currentFrame);
        this.dead = Math.max(this.dead, this.turn);
        this.reset(0);
      } else {
        this.dead = Math.max(this.dead, m.turn);
      }
      this.paused = false;
    } else if (m.type === "pause") {
      this.paused = true;
    } else if (m.type === "resume") {
      this.paused = false;
    }
  }

  take() {
    if (!this.head || this.hp >= this.head.length) {
      if (!this.q.length) return null;
      this.head = this.q.shift();
      this.hp = 0;
    }
    this.qlen--;
    return this.head[this.hp++];
  }

  sample() {
    while (this.frac >= 1) {
      const s = this.take();
      if (s === null) return null;
      this.a = this.b;
      this.b = s;
      this.frac -= 1;
    }
    const v = this.a + (this.b - this.a) * this.frac;
    this.frac += this.ratio;
    return v;
  }

  process(inputs, outputs) {
    const out = outputs[0][0];
    out.fill(0);
    if (!this.turn || this.paused) return true;
    if (!this.playing) {
      if (this.qlen >= this.prebuffer || (this.ended && this.qlen > 0)) {
        this.playing = true;
        if (this.stallAt !== null) {
          this.report("stall", this.stallAt, { frames: currentFrame - this.stallAt });
          this.stallAt = null;
        }
      } else if (this.ended && this.qlen === 0) {
        if (this.played) this.report("end", currentFrame);
        this.dead = Math.max(this.dead, this.turn);
        this.reset(0);
        return true;
      } else {
        return true;
      }
    }
    for (let i = 0; i < out.length; i++) {
      const v = this.sample();
      if (v === null) {
        if (this.ended) {
          if (this.played) this.report("end", currentFrame + i);
          this.dead = Math.max(this.dead, this.turn);
          this.reset(0);
        } else {
          this.playing = false;
          if (this.started) this.stallAt = currentFrame + i;
        }
        break;
      }
      out[i] = v;
      this.played++;
      if (!this.started && Math.abs(v) >= VOICED) {
        this.started = true;
        this.report("start", currentFrame + i);
      }
    }
    return true;
  }
}

registerProcessor("rejoinder-capture", Capture);
registerProcessor("rejoinder-playback", Playback);
