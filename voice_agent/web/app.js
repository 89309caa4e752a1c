// The page: wires the microphone, the connection and what the user sees.
//
// For tests and diagnostics the <html> element carries the playback state:
// data-playback ("idle", "buffering" or "playing"), data-played-ms (agent
// audio actually played since Start) and data-echo-cancellation (what the
// browser applied to the microphone).

import { AudioPipeline, MicError, WIRE_RATE } from "./audio.js";
import { Connection } from "./connection.js";

const MAX_TURNS_SHOWN = 8;
const STAGES = ["endpoint", "stt", "llm", "phrase", "tts"];

const $ = (id) => document.getElementById(id);
const root = document.documentElement;
const ui = {
  status: $("status"),
  statusText: $("status-text"),
  start: $("start"),
  mute: $("mute"),
  level: $("level"),
  speaking: $("speaking"),
  notice: $("notice"),
  transcript: $("transcript"),
  hint: $("hint"),
  v2v: $("v2v"),
  v2vTurn: $("v2v-turn"),
  turns: $("turns"),
};

const params = new URLSearchParams(location.search);
const wsUrl = new URL("ws", location.href);
wsUrl.protocol = location.protocol === "https:" ? "wss:" : "ws:";
// A server started with --auth-token wants it on the WebSocket: open the page as /?token=...
if (params.get("token")) wsUrl.searchParams.set("token", params.get("token"));

let audio = null;
let connection = null;
let running = false;
let muted = false;
let level = 0;
let userLine = null; // the user's utterance in progress (partial)
let agentLine = null; // the agent's answer being spoken
let noticeTimer = null;
const turnMetrics = [];

// Controls.

ui.start.addEventListener("click", () => (running ? stop() : start()));
ui.mute.addEventListener("click", () => setMuted(!muted));

async function start() {
  running = true;
  ui.start.disabled = true;
  hideNotice();
  setStatus("connecting", "Opening the microphone…");
  audio = new AudioPipeline({
    onFrame: sendFrame,
    onMark: (name) => connection?.sendJson({ type: "mark", name }),
    onPlayback: showPlayback,
    route: params.get("playback") === "context" ? "context" : "element",
  });
  try {
    await audio.start();
  } catch (error) {
    running = false;
    audio = null;
    ui.start.disabled = false;
    setStatus("idle", "Not connected");
    if (!(error instanceof MicError)) console.error(error);
    showNotice("error", error instanceof MicError ? error.message : `Audio could not start: ${error.message}`);
    return;
  }
  root.dataset.echoCancellation = String(audio.micSettings().echoCancellation ?? "unknown");
  connection = new Connection(wsUrl.href, {
    onStatus: showConnection,
    // The browser's own canceller took the echo out: the server's would find none to cancel.
    onOpen: () =>
      connection.sendJson({
        type: "start",
        sample_rate: WIRE_RATE,
        echo_cancelled: audio.micSettings().echoCancellation === true,
      }),
    onMessage: receive,
    onAudio: (pcm16) => audio.play(pcm16),
  });
  connection.open();
  ui.start.textContent = "Stop";
  ui.start.classList.add("stop");
  ui.start.disabled = false;
  ui.mute.disabled = false;
  ui.hint.hidden = true;
}

function stop() {
  running = false;
  connection?.close();
  audio?.stop();
  connection = audio = null;
  finishAgentLine();
  userLine = null;
  setMuted(false);
  ui.mute.disabled = true;
  ui.start.textContent = "Start";
  ui.start.classList.remove("stop");
  ui.level.style.width = "0";
  showPlayback({ state: "idle" });
  hideNotice();
  setStatus("idle", "Not connected");
}

function setMuted(value) {
  muted = value;
  if (audio) audio.muted = value;
  ui.mute.setAttribute("aria-pressed", String(value));
  ui.mute.textContent = value ? "Unmute" : "Mute";
  if (connection?.isOpen) showConnection({ state: "open" });
}

function sendFrame(pcm16, peak) {
  // Silence is sent too: the server's turn detection needs the pause after speech.
  connection?.send(pcm16);
  level = Math.max(muted ? 0 : peak, level * 0.8);
  ui.level.style.width = `${Math.min(100, Math.sqrt(level) * 100)}%`;
}

// Connection state.

function showConnection({ state, reason, detail, retryInMs }) {
  if (!running) return;
  const host = location.host;
  if (state === "connecting") {
    setStatus("connecting", "Connecting…");
  } else if (state === "open") {
    setStatus("open", muted ? "Connected · muted" : "Connected · listening");
    if (ui.notice.dataset.kind !== "info") hideNotice();
  } else if (state === "ended") {
    stop();
    showNotice("info", `The server ended the conversation${detail ? ` (${detail})` : ""}. Press Start to talk again.`);
  } else if (state === "retrying") {
    const seconds = Math.max(1, Math.round(retryInMs / 1000));
    const again = `Trying again in ${seconds} s…`;
    const why = detail ? ` (${detail})` : "";
    if (reason === "busy") {
      setStatus("connecting", "Server busy");
      showNotice("info", `The server cannot take the conversation yet${why}. ${again}`);
    } else if (reason === "dropped") {
      setStatus("error", "Reconnecting");
      showNotice("error", `The connection to the server dropped${why}. ${again}`);
      resetPlayback();
    } else {
      setStatus("error", "Server unreachable");
      showNotice("error", `Cannot reach the server at ${host}. Is voice-agent serve running? ${again}`);
      explainRefusal(again);
    }
  }
}

// A browser is not told why a WebSocket handshake failed. If the server
// answers HTTP, it is there and refused us: the token or this page's origin.
function explainRefusal(again) {
  fetch("readyz", { cache: "no-store" })
    .then((response) => {
      if (!response.ok || !running || connection?.isOpen) return;
      setStatus("error", "Connection refused");
      showNotice("error", `The server refused the connection: open this page with the right ?token=..., or allow its origin on the server. ${again}`);
    })
    .catch(() => {});
}

function setStatus(state, text) {
  ui.status.dataset.state = state;
  ui.statusText.textContent = text;
}

function showNotice(kind, text, hideAfterMs = 0) {
  clearTimeout(noticeTimer);
  ui.notice.dataset.kind = kind;
  ui.notice.textContent = text;
  ui.notice.hidden = false;
  if (hideAfterMs) noticeTimer = setTimeout(hideNotice, hideAfterMs);
}

function hideNotice() {
  clearTimeout(noticeTimer);
  ui.notice.hidden = true;
  delete ui.notice.dataset.kind;
}

// Server messages.

function receive(message) {
  switch (message.type) {
    case "transcript":
      if (message.role === "user") showUser(message.text, message.final);
      else showAgent(message.text, message.final);
      break;
    case "mark":
      audio?.mark(message.name);
      break;
    case "clear":
      audio?.clear();
      break;
    case "agent_state": // listening, thinking or speaking: for a stylesheet to show
      ui.status.dataset.agent = message.state;
      break;
    case "metrics":
      showMetrics(message);
      break;
    case "error":
      showNotice("warn", `Server: ${message.message}`, 6000);
      break;
    default:
      console.warn("ignoring an unknown message type", message.type);
  }
}

function resetPlayback() {
  audio?.clear();
  finishAgentLine();
}

// Transcript.

function line(role) {
  const item = document.createElement("li");
  item.className = `line ${role}`;
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = role === "user" ? "You" : "Agent";
  const text = document.createElement("p");
  text.className = "text";
  item.append(who, text);
  return item;
}

function place(item) {
  // A pending partial moves below anything said since it began.
  if (ui.transcript.lastElementChild !== item) ui.transcript.append(item);
  item.scrollIntoView({ block: "nearest" });
}

function showUser(text, final) {
  // Each partial carries the whole utterance so far: replace, never append.
  if (!userLine) userLine = line("user");
  userLine.querySelector(".text").textContent = text;
  userLine.classList.toggle("partial", !final);
  place(userLine);
  if (final) userLine = null;
}

function showAgent(text, final) {
  if (!agentLine) {
    if (final && !text) return; // interrupted before a word was heard
    agentLine = line("agent");
    place(agentLine);
  }
  const shown = agentLine.querySelector(".text");
  if (final) {
    // After a barge-in the final text is only what was heard.
    agentLine.classList.toggle("interrupted", text.length < shown.textContent.length);
    if (!text) agentLine.remove();
    shown.textContent = text;
    agentLine = null;
  } else {
    shown.textContent = text;
    agentLine.classList.add("live");
    ui.transcript.lastElementChild?.scrollIntoView({ block: "nearest" });
  }
}

function finishAgentLine() {
  agentLine?.classList.remove("live");
  agentLine = null;
}

// Playback.

function showPlayback({ state, playedMs }) {
  root.dataset.playback = state;
  if (playedMs !== undefined) root.dataset.playedMs = String(Math.round(playedMs));
  const playing = state === "playing";
  ui.speaking.hidden = !playing;
  for (const item of ui.transcript.querySelectorAll(".line.agent.speaking")) item.classList.remove("speaking");
  if (playing) [...ui.transcript.querySelectorAll(".line.agent")].at(-1)?.classList.add("speaking");
}

// Latency.

// Splits voice-to-voice into consecutive stages. Speech-to-text is what is
// left: the final transcript may have started during the pause (speculative),
// so only its wait after the turn ended counts.
function stages(m) {
  const total = m.voice_to_voice_ms ?? 0;
  const endpoint = m.endpoint_ms ?? 0;
  const llm = m.llm_ttft_ms ?? 0;
  const phrase = Math.max(0, (m.first_chunk_ms ?? llm) - llm);
  const tts = m.tts_ttfa_ms ?? 0;
  const stt = Math.max(0, total - endpoint - llm - phrase - tts);
  return { total, parts: { endpoint, stt, llm, phrase, tts } };
}

const STAGE_LABELS = {
  endpoint: "turn end (silence until the turn was committed)",
  stt: "speech-to-text wait",
  llm: "LLM first token",
  phrase: "LLM until the first speakable phrase",
  tts: "text-to-speech first audio",
};

function showMetrics(m) {
  turnMetrics.unshift(m);
  turnMetrics.length = Math.min(turnMetrics.length, MAX_TURNS_SHOWN);
  ui.v2v.textContent = formatMs(m.voice_to_voice_ms);
  ui.v2vTurn.textContent = ` · turn ${m.turn}`;
  const scale = Math.max(...turnMetrics.map((t) => t.voice_to_voice_ms ?? 0), 1);
  ui.turns.replaceChildren(
    ...turnMetrics.map((t) => {
      const { total, parts } = stages(t);
      const row = document.createElement("li");
      row.className = "turn";
      row.dataset.v2v = String(total);
      const label = document.createElement("span");
      label.className = "turn-label";
      label.textContent = `#${t.turn}`;
      const bar = document.createElement("div");
      bar.className = "turn-bar";
      bar.style.width = `${(total / scale) * 100}%`;
      for (const stage of STAGES) {
        if (!parts[stage]) continue;
        const part = document.createElement("span");
        part.className = `stage-${stage}`;
        part.style.flexGrow = String(parts[stage]);
        let title = `${STAGE_LABELS[stage]}: ${formatMs(parts[stage])}`;
        if (stage === "stt") title += ` (transcription took ${formatMs(t.stt_final_ms)}${t.stt_speculative ? ", started during the pause" : ""})`;
        part.title = title;
        bar.append(part);
      }
      const value = document.createElement("span");
      value.className = "turn-value";
      value.textContent = formatMs(total);
      const track = document.createElement("div");
      track.className = "turn-track";
      track.append(bar);
      row.append(label, track, value);
      return row;
    }),
  );
}

function formatMs(ms) {
  return ms === null || ms === undefined ? "–" : `${Math.round(ms)} ms`;
}

// Before Start: tell whether the server is there at all.
// Its 503 says why in JSON: loading its models, or busy (full, overloaded, shutting down).
fetch("readyz", { cache: "no-store" })
  .then(async (response) => {
    if (running) return;
    if (response.ok) setStatus("ready", "Server ready");
    else if (response.status === 503) {
      const reason = await response.json().then((body) => body.reason, () => "loading");
      setStatus("connecting", reason === "loading" ? "Server loading models" : "Server busy: try again shortly");
    } else setStatus("error", "No voice-agent server here");
  })
  .catch(() => {
    if (!running) setStatus("error", "Server unreachable");
  });
