// make_llama2.js — write a tokenizer.json in Llama-2's format (SentencePiece-style BPE as Hugging Face
// converts it: normalizer Sequence[Prepend "▁", Replace " " -> "▁"], no pre-tokenizer, BPE with
// byte_fallback and fuse_unk over <unk> <s> </s>, the 256 "<0xXX>" byte pieces, single characters and
// merges, decoder Sequence[Replace "▁" -> " ", ByteFallback, Fuse, Strip(" ", 1, 0)]), since Meta's own
// file cannot be downloaded here. The merges are learned from the given text files by a plain BPE
// trainer written here (SentencePiece's way of seeing text: each line normalized, split before every
// "▁" run's last "▁", pairs counted within pieces, the most frequent pair merged, ties by the smaller
// pair string); characters seen fewer than 3 times are left out of the vocabulary, so they take the
// byte pieces (byte fallback), as rare characters do in Llama-2.
// usage: node make_llama2.js MERGES PREFIX TEXT_FILE...   writes PREFIX-VARIANT.json for every VARIANT (the
// merges are learned once):
//   VARIANT llama2: as Llama-2's file; llava: plus LLaVA's added tokens <image> and <pad> (special,
//   not normalized), so that text around them is normalized piece by piece as HF does; metaspace: as newer
//   files (legacy = false): no normalizer, pre-tokenizer Metaspace(prepend_scheme first, split false), and
//   <image>; metaspace-split: Metaspace(always, split true) with a Metaspace decoder.
'use strict';
const fs = require('fs');

const [nMergesArg, prefix, ...files] = process.argv.slice(2);
const nMerges = parseInt(nMergesArg, 10);
const SP = '\u2581';
const lines = [];
for (const f of files) for (const l of fs.readFileSync(f, 'utf8').split('\n')) if (l.length) lines.push(l);

// pieces: the normalized line cut before each "▁" that follows a non-"▁" character (a word with its
// leading metaspace; runs of spaces stay with the word after them)
const words = new Map();
for (const l of lines) {
  const norm = SP + l.split(' ').join(SP);
  const pieces = norm.match(new RegExp(`${SP}*[^${SP}]*`, 'gu')).filter((p) => p.length);
  for (const p of pieces) words.set(p, (words.get(p) || 0) + 1);
}
// the alphabet: characters seen at least 3 times (by code point), in first-seen order
const charCount = new Map();
for (const [w, c] of words) for (const ch of w) charCount.set(ch, (charCount.get(ch) || 0) + c);
const alphabet = [...charCount.keys()].filter((ch) => charCount.get(ch) >= 3);
const known = new Set(alphabet);

// BPE on the words, characters outside the alphabet acting as barriers (never merged)
const unknownChar = (s) => [...s].length === 1 && !known.has(s);
let corpus = [...words].map(([w, c]) => ({ syms: [...w], c }));
const merges = [];
for (let m = 0; m < nMerges; m++) {
  const pairs = new Map();
  for (const { syms, c } of corpus)
    for (let i = 0; i + 1 < syms.length; i++) {
      if (unknownChar(syms[i]) || unknownChar(syms[i + 1])) continue;
      const k = syms[i] + ' ' + syms[i + 1];
      pairs.set(k, (pairs.get(k) || 0) + c);
    }
  let best = null, bestC = 1;
  for (const [k, c] of pairs) if (c > bestC || (c === bestC && best !== null && k < best)) { best = k; bestC = c; }
  if (best === null) break;
  merges.push(best);
  const [a, b] = best.split(' ');
  for (const w of corpus) {
    const s = [];
    for (let i = 0; i < w.syms.length; i++) {
      if (i + 1 < w.syms.length && w.syms[i] === a && w.syms[i + 1] === b) { s.push(a + b); i++; } else s.push(w.syms[i]);
    }
    w.syms = s;
  }
}

const vocab = { '<unk>': 0, '<s>': 1, '</s>': 2 };
let next = 3;
for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = next++;
for (const ch of alphabet) if (!(ch in vocab)) vocab[ch] = next++;
for (const m of merges) { const t = m.split(' ').join(''); if (!(t in vocab)) vocab[t] = next++; }

for (const variant of ['llama2', 'llava', 'metaspace', 'metaspace-split']) {
  let nextFree = next;
  const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false,
    special: true });
  const added = [special(0, '<unk>'), special(1, '<s>'), special(2, '</s>')];
  // HF gives an added token the model's id when its content is a model token, else the next free id
  if (variant === 'llava') for (const c of ['<image>', '<pad>']) added.push(special(c in vocab ? vocab[c] : nextFree++, c));
  const tok = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: SP },
      { type: 'Replace', pattern: { String: ' ' }, content: SP }] },
    pre_tokenizer: null,
    post_processor: { type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: '<s>', type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } } },
    decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: SP }, content: ' ' },
      { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
    model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges },
  };
  // newer files (transformers' legacy = false): no normalizer, a Metaspace pre-tokenizer prepending only at
  // the start of the text (first) or to every piece (always, here with split on)
  if (variant === 'metaspace' || variant === 'metaspace-split') {
    tok.normalizer = null;
    tok.pre_tokenizer = variant === 'metaspace' ? { type: 'Metaspace', replacement: SP, prepend_scheme: 'first', split: false }
                                                : { type: 'Metaspace', replacement: SP, prepend_scheme: 'always', split: true };
    if (variant === 'metaspace-split') tok.decoder = { type: 'Metaspace', replacement: SP, prepend_scheme: 'always', split: true };
    added.push(special('<image>' in vocab ? vocab['<image>'] : nextFree++, '<image>'));
  }
  fs.writeFileSync(`${prefix}-${variant}.json`, JSON.stringify(tok, null, 1));
}
process.stderr.write(`make_llama2: ${Object.keys(vocab).length} tokens (${alphabet.length} characters, ${merges.length} merges)\n`);
