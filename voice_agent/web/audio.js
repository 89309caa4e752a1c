// The page's audio: microphone capture and agent playback, both through the
// worklets in worklets.js. Knows nothing about the connection.

export const WIRE_RATE = 16000;
const FRAME_SAMPLES = 320;

// Chromium's echo canceller needs a few seconds of agent speech to learn the
// echo path; until then the start of each reply leaks into the microphone
// for a few hundred ms, which can be enough for a barge-in on itself. While
// it is still learning, the first GUARD_MS of each reply's playback are sent
// as silence. See docs/web.md, "Echo".
const ECHO_LEARNING_MS = 3000;
const GUARD_MS = 600;

const MIC_CONSTRAINTS = {
  echoCancellation: true,
  noiseSuppression: true,
  autoGainControl: true,
  channelCount: 1,
};

export class MicError extends Error {
  constructor(reason, message) {
    super(message);
    this.reason = reason; // "denied", "missing", "busy", "insecure" or "failed"
  }
}

export class AudioPipeline {
  // onFrame(ArrayBuffer pcm16, peak 0..1) every 20 ms of microphone audio;
  // onMark(name) once the audio before a server mark has played;
  // onPlayback({state, playedMs, queuedMs}) when playback starts, stops or progresses.
  //
  // Playback goes through an <audio> element fed by a MediaStream by default,
  // which leaked echo in fewer runs; "context" plays straight to the
  // AudioContext's destination, kept for comparison (docs/web.md, "Echo").
  constructor({ onFrame, onMark, onPlayback, route = "element" }) {
    this.onFrame = onFrame;
    this.onMark = onMark;
    this.onPlayback = onPlayback;
    this.route = route;
    this.context = null;
    this.playing = false;
    this.playedMs = 0;
    this.guardUntil = 0;
  }

  // Must be called from a user gesture (a click): browsers only let audio
  // start after one.
  async start() {
    if (!navigator.mediaDevices?.getUserMedia) {
      throw new MicError("insecure", "This browser gives no microphone here: open the page over https or on localhost.");
    }
    this.context = new AudioContext();
    const loaded = this.context.audioWorklet.addModule(new URL("worklets.js", import.meta.url));
    try {
      this.stream = await navigator.mediaDevices.getUserMedia({ audio: MIC_CONSTRAINTS });
    } catch (error) {
      this.stop();
      throw micError(error);
    }
    await loaded;
    await this.context.resume();
    this.track = this.stream.getAudioTracks()[0];

    this.source = this.context.createMediaStreamSource(this.stream);
    this.capture = new AudioWorkletNode(this.context, "capture", { numberOfOutputs: 0, channelCount: 1, channelCountMode: "explicit" });
    this.capture.port.onmessage = ({ data }) => {
      if (performance.now() < this.guardUntil) this.onFrame(new Int16Array(FRAME_SAMPLES).buffer, 0);
      else this.onFrame(data.frame, data.peak);
    };
    this.source.connect(this.capture);

    this.playback = new AudioWorkletNode(this.context, "playback", { numberOfInputs: 0, outputChannelCount: [1] });
    this.playback.port.onmessage = ({ data }) => {
      if (data.mark !== undefined) this.onMark(data.mark);
      else this.playbackChanged(data);
    };
    if (this.route === "element") {
      const sink = this.context.createMediaStreamDestination();
      this.playback.connect(sink);
      this.element = new Audio();
      this.element.srcObject = sink.stream;
      await this.element.play();
    } else {
      this.playback.connect(this.context.destination);
    }
  }

  playbackChanged(data) {
    const starting = data.state === "playing" && !this.playing;
    if (starting && this.playedMs < ECHO_LEARNING_MS && this.micSettings().echoCancellation) {
      this.guardUntil = performance.now() + GUARD_MS;
    }
    this.playing = data.state === "playing";
    this.playedMs = data.playedMs;
    this.onPlayback(data);
  }

  // What the browser actually applied, e.g. {echoCancellation: true, sampleRate: 48000}.
  micSettings() {
    return this.track ? this.track.getSettings() : {};
  }

  set muted(value) {
    // A disabled track yields silence, and silence keeps flowing to the server:
    // its turn detection needs it.
    if (this.track) this.track.enabled = !value;
  }

  play(pcm16) {
    this.playback?.port.postMessage({ audio: pcm16 }, [pcm16]);
  }

  mark(name) {
    this.playback?.port.postMessage({ mark: name });
  }

  clear() {
    this.playback?.port.postMessage({ clear: true });
  }

  stop() {
    this.stream?.getTracks().forEach((track) => track.stop());
    if (this.element) this.element.srcObject = null;
    this.context?.close();
    this.context = this.stream = this.track = this.source = this.capture = this.playback = this.element = null;
  }
}

function micError(error) {
  switch (error.name) {
    case "NotAllowedError":
    case "SecurityError":
      return new MicError("denied", "Microphone access was denied. Allow the microphone for this site in the browser's settings, then press Start again.");
    case "NotFoundError":
    case "OverconstrainedError":
      return new MicError("missing", "No microphone was found. Connect one and press Start again.");
    case "NotReadableError":
    case "AbortError":
      return new MicError("busy", "The microphone could not be opened; another program may be using it.");
    default:
      return new MicError("failed", `The microphone could not be opened: ${error.message || error.name}`);
  }
}
