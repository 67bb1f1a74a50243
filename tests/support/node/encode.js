// encode.js — encode each line of a UTF-8 file (without its newline) with Hugging Face tokenizers
// (the Rust library's Node bindings) and print the ids, one line per input line, as
// `rrfp-mm tokenizer encode --lines` does. With --decode, also check that HF decodes the ids back to
// the line and exit 1 if not. With --whole, the whole file (its newlines included) is one text.
// usage: node encode.js TOKENIZER.json CORPUS.txt [--decode] [--whole]
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function main() {
  const tok = Tokenizer.fromFile(process.argv[2]);
  const text = fs.readFileSync(process.argv[3], 'utf8');
  const check = process.argv.includes('--decode');
  let lines = text.split('\n');
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  if (process.argv.includes('--whole')) lines = [text]; /* the whole file, newlines included, as one text */
  const out = [];
  let bad = 0;
  for (const line of lines) {
    const enc = await tok.encode(line, null, { addSpecialTokens: false });
    const ids = enc.getIds();
    out.push(ids.join(' '));
    if (check) {
      const back = await tok.decode(ids, false);
      if (back !== line) {
        bad++;
        process.stderr.write(`HF decode differs for line ${JSON.stringify(line)}: ${JSON.stringify(back)}\n`);
      }
    }
  }
  process.stdout.write(out.join('\n') + (out.length ? '\n' : ''));
  if (bad) process.exit(1);
}
main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e) + '\n');
  process.exit(1);
});
