// tokenizer_hf.js — the Hugging Face side of bench/tokenizer.sh (the Rust `tokenizers` library through
// its Node bindings, installed in tests/support/node). Prints one JSON line.
// usage: node tokenizer_hf.js encode TOKENIZER.json TEXT     encodeBatch over the lines of TEXT
//        node tokenizer_hf.js whole TOKENIZER.json TEXT      one encode() of the whole text
//        node tokenizer_hf.js train TEXT VOCAB               BPE with a ByteLevel pre-tokenizer, train()
'use strict';
const fs = require('fs');
const tk = require('tokenizers');

async function main() {
  const [mode, a, b] = process.argv.slice(2);
  if (mode === 'encode') {
    const tok = tk.Tokenizer.fromFile(a);
    let lines = fs.readFileSync(b, 'utf8').split('\n');
    if (lines.length && lines[lines.length - 1] === '') lines.pop();
    const t0 = process.hrtime.bigint();
    const encs = await tok.encodeBatch(lines, { addSpecialTokens: false });
    const dt = Number(process.hrtime.bigint() - t0) / 1e9;
    let ids = 0;
    for (const e of encs) ids += e.getIds().length;
    console.log(JSON.stringify({ seconds: dt, ids, lines: lines.length }));
  } else if (mode === 'whole') {
    const tok = tk.Tokenizer.fromFile(a);
    const text = fs.readFileSync(b, 'utf8');
    const t0 = process.hrtime.bigint();
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    const dt = Number(process.hrtime.bigint() - t0) / 1e9;
    console.log(JSON.stringify({ seconds: dt, ids: enc.getIds().length }));
  } else if (mode === 'train') {
    // The Node bindings expose no BpeTrainer options: train() uses the model's default trainer
    // (min_frequency 0, alphabet = characters seen); the vocabulary size comes from the model.
    const tok = new tk.Tokenizer(tk.BPE.empty());
    tok.setPreTokenizer(tk.byteLevelPreTokenizer(false, true));
    const t0 = process.hrtime.bigint();
    tok.train([a]);
    const dt = Number(process.hrtime.bigint() - t0) / 1e9;
    console.log(JSON.stringify({ seconds: dt, vocab: tok.getVocabSize(true) }));
  } else {
    throw new Error('mode must be encode or train');
  }
}
main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e) + '\n');
  process.exit(1);
});
