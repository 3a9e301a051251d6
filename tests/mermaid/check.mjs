// Reads a JSON list of Mermaid diagrams on stdin, parses each with Mermaid itself (in jsdom,
// as a forge's renderer would) and prints, per diagram, its tasks as Mermaid resolved them:
// [{task, start, end, milestone}] with times in milliseconds, or {error} when it rejects it.
import { JSDOM } from "jsdom";

const dom = new JSDOM("<!doctype html><html><body></body></html>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import("mermaid");
mermaid.initialize({ startOnLoad: false });

let input = "";
for await (const chunk of process.stdin) input += chunk;
const out = [];
for (const text of JSON.parse(input)) {
  try {
    await mermaid.parse(text);
    const diagram = await mermaid.mermaidAPI.getDiagramFromText(text);
    out.push(
      diagram.db.getTasks().map((t) => ({
        task: t.task.trim(),
        start: t.startTime.getTime(),
        end: t.endTime.getTime(),
        milestone: Boolean(t.milestone),
      })),
    );
  } catch (e) {
    out.push({ error: String(e) });
  }
}
process.stdout.write(JSON.stringify(out));
