// An editor, for the tests of `tunnel acp`: the ACP TypeScript SDK's client app (not ours) runs
// `tunnel acp` over stdio and does what the test asks, one JSON command a line on stdin; it
// prints what happens as JSON lines on stdout.
//
//   ACP_SDK      the @agentclientprotocol/sdk directory
//   ACP_COMMAND  the command to run, a JSON array (the link comes in TUNNEL_LINK, from the env)
//
// Commands: {"id", "do": "initialize" | "new" | "list" | "load" | "prompt" | "cancel" |
// "set_mode" | "request" | "answer" | "quit", ...}. A request's outcome is printed as {"event": "result",
// "id", "result"} or {"event": "error", "id", "code", "message"}; "prompt" returns at once and
// its outcome comes when the turn ends. Also printed: every session/update ({"event": "update", "update"}), every
// permission request ({"event": "permission", "requestId", "params"}), every question
// (elicitation/create: {"event": "question", "requestId", "params"}) and their withdrawal
// ({"event": "withdrawn", "requestId"}), the agent's stderr lines and its exit. "initialize"
// takes the client's "capabilities"; "answer" takes an "optionId" (a permission request) or an
// "action" and "content" (a question).

import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const acp = await import(pathToFileURL(`${process.env.ACP_SDK}/dist/v1/stable/acp.js`).href);
const [program, ...args] = JSON.parse(process.env.ACP_COMMAND);

function print(event) {
  process.stdout.write(`${JSON.stringify(event)}\n`);
}

const child = spawn(program, args, { stdio: ["pipe", "pipe", "pipe"] });
createInterface({ input: child.stderr }).on("line", (line) => print({ event: "stderr", line }));
const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
exited.then((code) => print({ event: "exit", code }));

// Permission requests and questions waiting for the test's answer, by the host's request id.
const waiting = new Map();

function wait(requestId, withdrawn, signal) {
  return new Promise((resolve) => {
    waiting.set(requestId, resolve);
    signal.addEventListener("abort", () => {
      // Withdrawn by the agent ($/cancel_request): ACP's answer is the cancelled one.
      waiting.delete(requestId);
      print({ event: "withdrawn", requestId });
      resolve(withdrawn);
    });
  });
}

const app = acp
  .client()
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    print({ event: "update", sessionId: params.sessionId, update: params.update });
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params, signal }) => {
    const requestId = params._meta?.tunnel?.requestId ?? params.toolCall.toolCallId;
    print({ event: "permission", requestId, params });
    return wait(requestId, { outcome: { outcome: "cancelled" } }, signal);
  })
  .onRequest(acp.methods.client.elicitation.create, ({ params, signal }) => {
    const requestId = params._meta?.tunnel?.requestId ?? null;
    print({ event: "question", requestId, params });
    return wait(requestId, { action: "cancel" }, signal);
  });

const connection = app.connect(
  acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout)),
);
const agent = connection.agent;

async function run(id, call) {
  try {
    print({ event: "result", id, result: (await call()) ?? null });
  } catch (error) {
    print({ event: "error", id, code: error?.code ?? null, message: String(error?.message ?? error) });
  }
}

const cwd = process.cwd();
for await (const line of createInterface({ input: process.stdin })) {
  const command = JSON.parse(line);
  const { id } = command;
  switch (command.do) {
    case "initialize":
      await run(id, () =>
        agent.request(acp.methods.agent.initialize, {
          protocolVersion: acp.PROTOCOL_VERSION,
          clientCapabilities: command.capabilities ?? {},
          clientInfo: { name: "test-editor", version: "1.0.0" },
        }),
      );
      break;
    case "new":
      await run(id, () => agent.request(acp.methods.agent.session.new, { cwd, mcpServers: [] }));
      break;
    case "list":
      await run(id, () => agent.request(acp.methods.agent.session.list, { cwd }));
      break;
    case "load":
      await run(id, () =>
        agent.request(acp.methods.agent.session.load, {
          sessionId: command.sessionId,
          cwd,
          mcpServers: [],
        }),
      );
      break;
    case "prompt":
      // Not awaited: the turn runs while the test goes on.
      run(id, () =>
        agent.request(acp.methods.agent.session.prompt, {
          sessionId: command.sessionId,
          prompt: [{ type: "text", text: command.text }],
        }),
      );
      break;
    case "cancel":
      await run(id, () =>
        agent.notify(acp.methods.agent.session.cancel, { sessionId: command.sessionId }),
      );
      break;
    case "set_mode":
      await run(id, () =>
        agent.request(acp.methods.agent.session.setMode, {
          sessionId: command.sessionId,
          modeId: command.modeId,
        }),
      );
      break;
    case "request":
      // Any other method, as the editor names it (session/set_model, ACP's unstable one).
      await run(id, () => agent.request(command.method, command.params));
      break;
    case "answer": {
      const resolve = waiting.get(command.requestId);
      waiting.delete(command.requestId);
      if (command.optionId !== undefined) {
        resolve?.({ outcome: { outcome: "selected", optionId: command.optionId } });
      } else {
        resolve?.({ action: command.action, ...(command.content ? { content: command.content } : {}) });
      }
      print({ event: "result", id, result: { answered: Boolean(resolve) } });
      break;
    }
    case "quit":
      child.stdin.end();
      print({ event: "result", id, result: { code: await exited } });
      connection.close();
      process.exit(0);
  }
}
