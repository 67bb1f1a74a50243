// resave.js — load a tokenizer.json with Hugging Face tokenizers and save it again as HF writes it
// (its own field order, merges as pairs, pretty-printed), to check that we read HF-written files and
// that our hash ignores formatting.
// usage: node resave.js IN.json OUT.json
'use strict';
const { Tokenizer } = require('tokenizers');
Tokenizer.fromFile(process.argv[2]).save(process.argv[3], true);
