// render_chat.js — render chat templates with @huggingface/jinja (transformers.js's Jinja, the Hugging Face
// implementation that runs here without Python's jinja2). Input: a JSON file of jobs {template, messages,
// add_generation_prompt}; output: the JSON array of the rendered strings, in order.
// usage: node render_chat.js JOBS.json
'use strict';
const fs = require('fs');
const { Template } = require('@huggingface/jinja');

const jobs = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const out = jobs.map((j) => new Template(j.template).render({ messages: j.messages,
  add_generation_prompt: j.add_generation_prompt }));
process.stdout.write(JSON.stringify(out) + '\n');
