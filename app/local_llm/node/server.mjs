// The demo LLM's OpenAI-compatible server: gemma-3-270m (GGUF) on node-llama-cpp's prebuilt llama.cpp.
//
// Why Node: node-llama-cpp ships llama.cpp prebuilt for Linux x64 and arm64 (and macOS), with every x86
// CPU variant built (sse42, haswell/AVX2, skylakex/AVX-512, sapphirerapids/AMX, zen4, ...) and the best
// one the running CPU supports picked at load: nothing is compiled on the user's machine, and nothing
// compiled for one CPU runs on another (docs/local-llm.md). Stdlib http only; node-llama-cpp is imported
// from the install directory app/local_llm/install.py made (--modules).
//
// usage: node server.mjs --model FILE --modules DIR/node_modules [--host 127.0.0.1] [--port 18082]
//                        [--ctx 2048] [--threads N] [--alias gemma-3-270m]
// Routes: GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions (SSE with
// "stream": true). One generation at a time (one context sequence); later requests wait their turn.
import http from "node:http";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

// The GGUF is the *base* model. With its own gemma template it ends the turn at once and answers ''.
// Vicuna-style turns make it talk; without stop sequences it then writes both sides of an invented
// dialogue until max_tokens. So: vicuna turns, the request's system message honoured, stop at "USER:".
const DEFAULT_SYSTEM =
  "A chat between a curious user and an artificial intelligence assistant. " +
  "The assistant gives helpful, detailed, and polite answers to the user's questions.";
// The base model also writes the next turn in lower case ("\n\nuser: ..."): stop there too.
const CHAT_STOPS = ["USER:", "\nASSISTANT:", "\nuser:", "\nUser:"];
const DEFAULT_MAX_TOKENS = 256;
const MAX_BODY_BYTES = 4 * 1024 * 1024;

const { values: opts } = parseArgs({
  options: {
    model: { type: "string" },
    modules: { type: "string" },
    host: { type: "string", default: "127.0.0.1" },
    port: { type: "string", default: "18082" },
    ctx: { type: "string", default: "2048" },
    threads: { type: "string", default: "1" },
    alias: { type: "string", default: "gemma-3-270m" },
  },
});
if (!opts.model || !opts.modules) {
  console.error("server.mjs: --model and --modules are required");
  process.exit(2);
}

// A message's text: a string, or the text parts of a content list (images mean nothing to this model);
// the router's definition (app/common/chat_text.py), for the part types a chat body carries.
const TEXT_PARTS = new Set(["text", "input_text", "output_text"]);
function contentText(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .filter((p) => p && typeof p === "object" && TEXT_PARTS.has(p.type) && typeof p.text === "string")
      .map((p) => p.text)
      .join("\n");
  }
  return "";
}

// System messages replace the default system prompt; every other role speaks as USER, so tool results
// still reach the model as context.
function chatPrompt(messages) {
  const system = messages.filter((m) => m.role === "system").map((m) => contentText(m.content)).filter(Boolean);
  const lines = [system.join("\n") || DEFAULT_SYSTEM, ""];
  for (const m of messages) {
    if (m.role === "system") continue;
    lines.push(`${m.role === "assistant" ? "ASSISTANT" : "USER"}: ${contentText(m.content).trim()}`);
  }
  lines.push("ASSISTANT:");
  return lines.join("\n");
}

class BadRequest extends Error {
  constructor(message, code = null, status = 400) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

function errorBody(message, type, code) {
  return { error: { message, type, param: null, code } };
}

function stopList(stop) {
  if (stop === undefined || stop === null) return [];
  const list = typeof stop === "string" ? [stop] : stop;
  if (!Array.isArray(list) || list.some((s) => typeof s !== "string")) {
    throw new BadRequest("'stop' must be a string or a list of strings");
  }
  return list.filter((s) => s.length > 0);
}

function numberOr(value, fallback, name, lo, hi) {
  if (value === undefined || value === null) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value < lo || value > hi) {
    throw new BadRequest(`'${name}' must be a number in [${lo}, ${hi}]`);
  }
  return value;
}

// What a request asks the engine for, for both endpoints.
function generationOf(body, chat) {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new BadRequest("the request body must be a JSON object");
  }
  let prompt;
  if (chat) {
    if (!Array.isArray(body.messages) || body.messages.length === 0) {
      throw new BadRequest("'messages' must be a non-empty list");
    }
    if (body.messages.some((m) => typeof m !== "object" || m === null || typeof m.role !== "string")) {
      throw new BadRequest("each message needs a 'role'");
    }
    prompt = chatPrompt(body.messages);
  } else {
    prompt = Array.isArray(body.prompt) && body.prompt.length === 1 ? body.prompt[0] : body.prompt;
    if (typeof prompt !== "string") throw new BadRequest("'prompt' must be a string");
  }
  const maxTokens = numberOr(body.max_completion_tokens ?? body.max_tokens, DEFAULT_MAX_TOKENS, "max_tokens", 1, 1e6);
  return {
    prompt,
    stops: [...(chat ? CHAT_STOPS : []), ...stopList(body.stop)],
    maxTokens: Math.floor(maxTokens),
    temperature: numberOr(body.temperature, 0.8, "temperature", 0, 2),
    topP: numberOr(body.top_p, 0.95, "top_p", 0, 1),
    seed: body.seed === undefined || body.seed === null ? undefined : numberOr(body.seed, 0, "seed", 0, 2 ** 32),
    stream: body.stream === true,
    includeUsage: body.stream_options?.include_usage === true,
  };
}

function finishReason(meta) {
  return meta.stopReason === "maxTokens" ? "length" : "stop";
}

async function main() {
  let backend = "unknown";
  const { getLlama, LlamaCompletion, LlamaLogLevel } = await import(
    pathToFileURL(join(opts.modules, "node-llama-cpp", "dist", "index.js")).href
  );
  const llama = await getLlama({
    build: "never", // prebuilt only: never compile, never download
    usePrebuiltBinaries: true,
    skipDownload: true,
    gpu: false,
    progressLogs: false,
    logLevel: LlamaLogLevel.debug, // the "loaded CPU backend" line is a debug line; the logger keeps only errors
    logger: (level, message) => {
      const variant = /loaded CPU backend from .*libggml-cpu-([\w-]+)\./.exec(message);
      if (variant) backend = variant[1];
      if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal) process.stderr.write(message);
    },
  });
  const model = await llama.loadModel({ modelPath: opts.model });
  const context = await model.createContext({ contextSize: Number(opts.ctx), threads: Number(opts.threads) });
  const completion = new LlamaCompletion({ contextSequence: context.getSequence() });
  console.log(`demo LLM: ${opts.alias} from ${opts.model}; llama.cpp CPU variant: ${backend}; threads ${opts.threads}`);

  let queue = Promise.resolve(); // one generation at a time
  const exclusive = (fn) => {
    const run = queue.then(fn, fn);
    queue = run.catch(() => {});
    return run;
  };

  async function generate(gen, signal, onText) {
    const promptTokens = model.tokenize(gen.prompt).length;
    const room = Number(opts.ctx) - promptTokens;
    if (room < 1) {
      throw new BadRequest(
        `the prompt is ${promptTokens} tokens; this model's context is ${opts.ctx}`,
        "context_length_exceeded",
      );
    }
    let completionTokens = 0;
    const result = await completion.generateCompletionWithMeta(gen.prompt, {
      maxTokens: Math.min(gen.maxTokens, room),
      temperature: gen.temperature,
      topP: gen.topP,
      seed: gen.seed,
      customStopTriggers: gen.stops.length ? gen.stops : undefined,
      signal,
      stopOnAbortSignal: true,
      trimWhitespaceSuffix: true, // "Hello.\n\n" -> "Hello." (the turn ends; trailing blank lines mean nothing)
      onToken: (tokens) => {
        completionTokens += tokens.length;
      },
      onTextChunk: onText,
    });
    return {
      text: result.response,
      finish: finishReason(result.metadata),
      usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
    };
  }

  // A tiny model sometimes ends its turn at once (a newline, then a stop): the reply trims to
  // nothing, and a README example answered "". Sampled replies (no seed, temperature > 0) get one
  // more sample; a stream has already sent what it had, and a seeded or greedy one would repeat.
  // Usage counts both samples.
  async function reply(gen, signal) {
    const first = await generate(gen, signal, undefined);
    const sampled = gen.seed === undefined && gen.temperature > 0;
    if (first.text !== "" || first.finish !== "stop" || !sampled || signal.aborted) return first;
    const second = await generate(gen, signal, undefined);
    const completion = first.usage.completion_tokens + second.usage.completion_tokens;
    const usage = { ...second.usage, completion_tokens: completion, total_tokens: second.usage.prompt_tokens + completion };
    return { ...second, usage };
  }

  function send(res, status, body) {
    const data = JSON.stringify(body);
    res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(data) });
    res.end(data);
  }

  async function readJson(req) {
    const chunks = [];
    let size = 0;
    for await (const chunk of req) {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) throw new BadRequest("request body too large", null, 413);
      chunks.push(chunk);
    }
    try {
      return JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      throw new BadRequest("the request body is not valid JSON");
    }
  }

  async function complete(req, res, chat) {
    const gen = generationOf(await readJson(req), chat);
    const id = `${chat ? "chatcmpl" : "cmpl"}-${randomUUID()}`;
    const created = Math.floor(Date.now() / 1000);
    const object = chat ? "chat.completion" : "text_completion";
    const aborter = new AbortController();
    res.on("close", () => aborter.abort()); // the client went away: stop generating for it
    if (!gen.stream) {
      const out = await exclusive(() => reply(gen, aborter.signal));
      const choice = chat
        ? { index: 0, message: { role: "assistant", content: out.text }, logprobs: null, finish_reason: out.finish }
        : { index: 0, text: out.text, logprobs: null, finish_reason: out.finish };
      send(res, 200, { id, object, created, model: opts.alias, choices: [choice], usage: out.usage });
      return;
    }
    const chunkObject = chat ? "chat.completion.chunk" : "text_completion";
    const event = (choices, extra = {}) =>
      res.write(`data: ${JSON.stringify({ id, object: chunkObject, created, model: opts.alias, choices, ...extra })}\n\n`);
    const delta = (text) => (chat ? { index: 0, delta: { content: text }, finish_reason: null } : { index: 0, text, finish_reason: null });
    await exclusive(async () => {
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
      if (chat) event([{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }]);
      const out = await generate(gen, aborter.signal, (text) => event([delta(text)]));
      event([chat ? { index: 0, delta: {}, finish_reason: out.finish } : { index: 0, text: "", finish_reason: out.finish }]);
      if (gen.includeUsage) event([], { usage: out.usage });
      res.end("data: [DONE]\n\n");
    });
  }

  const server = http.createServer(async (req, res) => {
    const path = (req.url || "/").split("?")[0];
    try {
      if (req.method === "GET" && path === "/health") return send(res, 200, { status: "ok", cpu_variant: backend });
      if (req.method === "GET" && path === "/v1/models") {
        return send(res, 200, { object: "list", data: [{ id: opts.alias, object: "model", created: 0, owned_by: "svc-sr-demo" }] });
      }
      if (req.method === "POST" && path === "/v1/chat/completions") return await complete(req, res, true);
      if (req.method === "POST" && path === "/v1/completions") return await complete(req, res, false);
      return send(res, 404, errorBody(`no route ${req.method} ${path}`, "invalid_request_error", "not_found"));
    } catch (err) {
      if (res.headersSent) return res.destroy(err);
      if (err instanceof BadRequest) return send(res, err.status, errorBody(err.message, "invalid_request_error", err.code));
      console.error(`request failed: ${err && err.stack ? err.stack : err}`);
      return send(res, 500, errorBody("the demo LLM failed to generate", "server_error", null));
    }
  });
  server.keepAliveTimeout = 65_000;
  server.listen(Number(opts.port), opts.host, () => console.log(`listening on http://${opts.host}:${opts.port}/v1`));

  const shutdown = async () => {
    server.close();
    await context.dispose();
    await model.dispose();
    process.exit(0);
  };
  process.on("SIGTERM", shutdown);
  process.on("SIGINT", shutdown);
}

main().catch((err) => {
  console.error(`demo LLM failed to start: ${err && err.stack ? err.stack : err}`);
  process.exit(1);
});
