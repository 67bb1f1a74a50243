// encode_texts.js — encode each text of a JSON array of strings with Hugging Face tokenizers (the Rust
// library's Node bindings) as encode(text, add_special_tokens = false) and print the JSON array of the ids.
// usage: node encode_texts.js TOKENIZER.json TEXTS.json
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function main() {
  const tok = Tokenizer.fromFile(process.argv[2]);
  const texts = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
  const out = [];
  for (const t of texts) out.push((await tok.encode(t, null, { addSpecialTokens: false })).getIds());
  process.stdout.write(JSON.stringify(out) + '\n');
}
main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e) + '\n');
  process.exit(1);
});
