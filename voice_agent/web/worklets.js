// Audio worklets: microphone capture at 16 kHz and agent playback with a jitter buffer.
//
// Both run on the audio rendering thread at the AudioContext's own rate
// (`sampleRate`, usually 48000 or 44100): browsers differ in which context
// rates a microphone may be connected to, so the page never asks for 16 kHz
// and the resampling happens here.

const WIRE_RATE = 16000;
const FRAME_SAMPLES = 320; // 20 ms at 16 kHz
const PREBUFFER_S = 0.06; // playback starts once this much audio is queued (or a chunk ends)
const STATE_INTERVAL_S = 0.1; // how often playback progress is reported while playing

// A streaming windowed-sinc resampler. The kernel is tabulated once; each
// output sample interpolates it at its fractional position in the input.
class Resampler {
  constructor(inRate, outRate) {
    this.step = inRate / outRate; // input samples per output sample
    // Low-pass below the lower Nyquist frequency, in cycles per input sample x 2.
    this.cutoff = Math.min(1, outRate / inRate) * 0.92;
    this.half = Math.ceil(8 / this.cutoff); // kernel half-width in input samples
    this.resolution = 64; // table points per input sample
    const size = 2 * this.half * this.resolution + 1;
    this.table = new Float32Array(size + 1);
    for (let i = 0; i < size; i++) {
      const t = i / this.resolution - this.half;
      const x = Math.PI * this.cutoff * t;
      const sinc = t === 0 ? 1 : Math.sin(x) / x;
      const w = 0.42 + 0.5 * Math.cos((Math.PI * t) / this.half) + 0.08 * Math.cos((2 * Math.PI * t) / this.half);
      this.table[i] = this.cutoff * sinc * w; // Blackman window
    }
    this.reset();
  }

  reset() {
    // Start with half a kernel of zeros so the first output is centred on input 0.
    this.buffer = new Float32Array(this.half);
    this.position = this.half;
  }

  process(input) {
    const buffer = new Float32Array(this.buffer.length + input.length);
    buffer.set(this.buffer);
    buffer.set(input, this.buffer.length);
    const count = Math.max(0, Math.ceil((buffer.length - this.half - this.position) / this.step));
    const out = new Float32Array(count);
    const { half, resolution, table } = this;
    let position = this.position;
    for (let n = 0; n < count; n++) {
      const centre = Math.floor(position);
      let sum = 0;
      for (let k = centre - half + 1; k <= centre + half; k++) {
        if (k < 0 || k >= buffer.length) continue;
        const t = (k - position + half) * resolution;
        const i = Math.floor(t);
        const a = t - i;
        sum += buffer[k] * (table[i] * (1 - a) + table[i + 1] * a);
      }
      out[n] = sum;
      position += this.step;
    }
    // Keep what the next outputs still need.
    const keepFrom = Math.max(0, Math.floor(position) - half);
    this.buffer = buffer.slice(keepFrom);
    this.position = position - keepFrom;
    return out;
  }
}

// Microphone → 20 ms PCM16 frames at 16 kHz, posted to the page.
class CaptureProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.resampler = new Resampler(sampleRate, WIRE_RATE);
    this.frame = new Int16Array(FRAME_SAMPLES);
    this.filled = 0;
    this.peak = 0;
  }

  process(inputs) {
    const channel = inputs[0][0];
    if (!channel) return true; // the source is not producing yet
    const samples = this.resampler.process(channel);
    for (let i = 0; i < samples.length; i++) {
      const s = Math.max(-1, Math.min(1, samples[i]));
      this.peak = Math.max(this.peak, Math.abs(s));
      this.frame[this.filled++] = s < 0 ? s * 0x8000 : s * 0x7fff;
      if (this.filled === FRAME_SAMPLES) {
        const frame = this.frame;
        this.port.postMessage({ frame: frame.buffer, peak: this.peak }, [frame.buffer]);
        this.frame = new Int16Array(FRAME_SAMPLES);
        this.filled = 0;
        this.peak = 0;
      }
    }
    return true;
  }
}

// Agent PCM16 at 16 kHz → speakers, through a small jitter buffer.
//
// The page posts, in arrival order: {audio: ArrayBuffer}, {mark: name} and
// {clear: true}. A mark is posted back once every sample queued before it has
// been played, so the server learns what the user actually heard; on clear
// the queue is dropped at once and its marks are posted back as well.
class PlaybackProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.resampler = new Resampler(WIRE_RATE, sampleRate);
    this.queue = []; // Float32Array at the context rate, or {mark}
    this.head = 0; // read offset into queue[0] when it is audio
    this.queued = 0; // samples queued, at the context rate
    this.state = "idle"; // idle → buffering → playing → idle
    this.played = 0; // samples played since the page started, at the context rate
    this.lastReport = 0;
    this.port.onmessage = (event) => this.receive(event.data);
  }

  receive(message) {
    if (message.audio) {
      const pcm = new Int16Array(message.audio);
      const floats = new Float32Array(pcm.length);
      for (let i = 0; i < pcm.length; i++) floats[i] = pcm[i] / 0x8000;
      const samples = this.resampler.process(floats);
      this.queue.push(samples);
      this.queued += samples.length;
      if (this.state === "idle") this.setState("buffering");
    } else if (message.mark !== undefined) {
      this.queue.push({ mark: message.mark });
      // A chunk ended: play what is there even if it is shorter than the prebuffer.
      if (this.state === "buffering") this.setState("playing");
      if (this.state === "idle") this.releaseMarks();
    } else if (message.clear) {
      for (const item of this.queue) if (!(item instanceof Float32Array)) this.postMark(item.mark);
      this.queue = [];
      this.head = 0;
      this.queued = 0;
      this.resampler.reset();
      this.setState("idle");
    }
  }

  process(inputs, outputs) {
    const out = outputs[0][0];
    if (this.state === "buffering" && this.queued >= PREBUFFER_S * sampleRate) this.setState("playing");
    if (this.state === "playing") {
      let written = 0;
      while (written < out.length && this.queue.length) {
        const item = this.queue[0];
        if (!(item instanceof Float32Array)) {
          this.postMark(item.mark);
          this.queue.shift();
          continue;
        }
        const n = Math.min(out.length - written, item.length - this.head);
        out.set(item.subarray(this.head, this.head + n), written);
        written += n;
        this.head += n;
        this.queued -= n;
        if (this.head === item.length) {
          this.queue.shift();
          this.head = 0;
        }
      }
      this.played += written;
      this.releaseMarks();
      if (!this.queue.length) this.setState("idle");
      else if (currentTime - this.lastReport >= STATE_INTERVAL_S) this.report();
    }
    for (let c = 1; c < outputs[0].length; c++) outputs[0][c].set(out);
    return true;
  }

  // Marks at the head of the queue have nothing left to wait for.
  releaseMarks() {
    while (this.queue.length && !(this.queue[0] instanceof Float32Array)) this.postMark(this.queue.shift().mark);
  }

  postMark(name) {
    this.port.postMessage({ mark: name });
  }

  setState(state) {
    if (state === this.state) return;
    this.state = state;
    this.report();
  }

  report() {
    this.lastReport = currentTime;
    this.port.postMessage({ state: this.state, playedMs: (this.played / sampleRate) * 1000, queuedMs: (this.queued / sampleRate) * 1000 });
  }
}

registerProcessor("capture", CaptureProcessor);
registerProcessor("playback", PlaybackProcessor);
