// Every call an app makes with ollama-js, against the gateway at process.argv[2];
// prints what came back, as one JSON object, for test_ollama_js.py to check.
import { Ollama } from "ollama";

const ollama = new Ollama({ host: process.argv[2] });
const messages = [{ role: "user", content: "hello" }];
const out = {};
out.list = (await ollama.list()).models.map(m => m.name);
out.ps = (await ollama.ps()).models.map(m => [m.name, m.expires_at]);
out.show = (await ollama.show({ model: "sim-a" })).capabilities;
const whole = await ollama.chat({ model: "sim-a", messages, options: { num_predict: 3 } });
out.chat = [whole.message.content, whole.done_reason, whole.eval_count];
const parts = [];
for await (const part of await ollama.chat({ model: "sim-a", messages, stream: true,
                                             options: { num_predict: 3 } })) {
  parts.push([part.message.content, part.done]);
}
out.chat_stream = parts;
out.generate = (await ollama.generate({ model: "sim-a", prompt: "hi", options: { num_predict: 2 } })).response;
const pieces = [];
for await (const part of await ollama.generate({ model: "sim-a", prompt: "hi", stream: true,
                                                 options: { num_predict: 2 } })) {
  pieces.push(part.response);
}
out.generate_stream = pieces;
out.embed = (await ollama.embed({ model: "sim-embed", input: ["a", "b"] })).embeddings.map(v => v.length);
out.embeddings = (await ollama.embeddings({ model: "sim-embed", prompt: "a" })).embedding.length;
out.unload = (await ollama.generate({ model: "sim-a", prompt: "", keep_alive: 0 })).done_reason;
out.ps_after = (await ollama.ps()).models.length;
try {
  await ollama.chat({ model: "nope", messages });
} catch (e) {
  out.error = [e.status_code, e.error];
}
console.log(JSON.stringify(out));
