// The WebSocket to the server, reopened with backoff when it drops.
// Speaks the native protocol's framing (docs/protocol.md): binary frames are
// PCM16 audio, text frames are JSON messages.

const BACKOFF_FIRST_MS = 500;
const BACKOFF_MAX_MS = 10000;
const TRY_AGAIN_LATER = 1013; // the server is loading its models, full, or shutting down
const NORMAL_CLOSURE = 1000; // the server ended the conversation: an idle or a session time limit, a call ended

export class Connection {
  // onStatus({state, reason, detail, retryInMs}): state is "connecting",
  // "open", "retrying", "ended" (by the server, not retried) or "closed"; reason
  // says why it is retrying: "unreachable", "dropped" or "busy"; detail is the
  // server's close reason.
  // onOpen() after each (re)connection, before any message;
  // onMessage(object) for JSON, onAudio(ArrayBuffer) for PCM16.
  constructor(url, { onStatus, onOpen, onMessage, onAudio }) {
    this.url = url;
    this.onStatus = onStatus;
    this.onOpen = onOpen;
    this.onMessage = onMessage;
    this.onAudio = onAudio;
    this.attempt = 0;
    this.socket = null;
    this.timer = null;
    this.wanted = false;
  }

  open() {
    this.wanted = true;
    this.attempt = 0;
    this.connect();
  }

  connect() {
    this.timer = null;
    this.onStatus({ state: "connecting" });
    const socket = new WebSocket(this.url);
    socket.binaryType = "arraybuffer";
    let opened = false;
    socket.onopen = () => {
      opened = true;
      this.onStatus({ state: "open" });
      this.onOpen();
    };
    socket.onmessage = ({ data }) => {
      if (data instanceof ArrayBuffer) {
        this.onAudio(data);
        return;
      }
      let message;
      try {
        message = JSON.parse(data);
      } catch {
        console.warn("ignoring a text message that is not JSON");
        return;
      }
      this.onMessage(message);
    };
    // A failed connection fires error and then close; close alone decides.
    socket.onerror = () => {};
    socket.onclose = (event) => {
      if (this.socket !== socket) return;
      this.socket = null;
      if (!this.wanted) return;
      if (opened && event.code === NORMAL_CLOSURE) {
        // Reconnecting would start a new conversation (and its greeting) behind the user's back.
        this.wanted = false;
        this.onStatus({ state: "ended", detail: event.reason });
        return;
      }
      let reason = opened ? "dropped" : "unreachable";
      if (event.code === TRY_AGAIN_LATER) reason = "busy";
      else if (opened) this.attempt = 0; // a connection that worked starts the backoff afresh
      this.retry(reason, event.reason);
    };
    this.socket = socket;
  }

  retry(reason, detail) {
    const delay = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** this.attempt) * (0.8 + 0.4 * Math.random());
    this.attempt++;
    this.onStatus({ state: "retrying", reason, detail, retryInMs: delay });
    this.timer = setTimeout(() => this.connect(), delay);
  }

  get isOpen() {
    return this.socket?.readyState === WebSocket.OPEN;
  }

  send(data) {
    if (this.isOpen) this.socket.send(data);
  }

  sendJson(message) {
    this.send(JSON.stringify(message));
  }

  close() {
    this.wanted = false;
    clearTimeout(this.timer);
    this.timer = null;
    const socket = this.socket;
    this.socket = null;
    if (socket) {
      if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "stop" }));
      socket.close(1000, "stopped");
    }
    this.onStatus({ state: "closed" });
  }
}
