#!/usr/bin/env python3
"""chat_templates_ref.py — the prompts LLaVA's own code builds, written to tests/support/fixtures/chat_templates_expected.json
for test_templates (tests/data/test_templates.c compares `rrfp-mm pack --template`'s segments with them).

Not run by the test suite (it needs the two repositories): regenerate with
  chat_templates_ref.py LLAVA_CONVERSATION_PY LLAVA_NEXT_CONVERSATION_PY > tests/support/fixtures/chat_templates_expected.json
where the files are haotian-liu/LLaVA's and LLaVA-VL/LLaVA-NeXT's llava/conversation.py (the expected file in
the repository was made from LLaVA c121f04 and LLaVA-NeXT df17966).

The text of each template is made by those files' Conversation.get_prompt where LLaVA trains with it, after
LLaVA's preprocess_multimodal (an <image> moved to the front of its turn):
  vicuna_v1  conv_vicuna_v1.get_prompt() (SeparatorStyle.TWO), as preprocess_v1 tokenizes it;
  chatml     conv_qwen.get_prompt() (SeparatorStyle.CHATML), which preprocess_qwen's chat template
             ("<|im_start|>" role "\\n" content "<|im_end|>\\n" per message) reproduces;
  llama_3    preprocess_llama3: apply_chat_template of the system message, then of each message without its
             BOS, with Llama-3-Instruct's template (Meta's tokenizer_config.json; written out below since the
             tokenizer cannot be downloaded here: bos + '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n'
             + content | trim + '<|eot_id|>'), system message conv_llava_llama_3.system;
  plain      preprocess_plain: "<image>" + caption + conv_llava_plain.sep.
"supervised": the answers' text as the engine supervises it (template.h), for the test's second check."""
import importlib.util
import json
import sys
import types

DEFAULT_IMAGE_TOKEN = "<image>"


def load(path, name):
    # LLaVA-NeXT's conversation.py imports transformers for AutoTokenizer (unused here: no download)
    tf = types.ModuleType("transformers")

    class AutoTokenizer:
        @staticmethod
        def from_pretrained(*a, **k):
            raise RuntimeError("offline")

    tf.AutoTokenizer = AutoTokenizer
    sys.modules.setdefault("transformers", tf)
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def preprocess_multimodal(turns):
    # LLaVA's llava/train/train.py preprocess_multimodal (not mmtag, no im_start_end)
    out = []
    for t in turns:
        v = t["value"]
        if DEFAULT_IMAGE_TOKEN in v:
            v = v.replace(DEFAULT_IMAGE_TOKEN, "").strip()
            v = (DEFAULT_IMAGE_TOKEN + "\n" + v).strip()
        out.append({"from": t["from"], "value": v})
    return out


class Llama3Tokenizer:
    """apply_chat_template(tokenize=False) with Llama-3-Instruct's template."""
    bos_token = "<|begin_of_text|>"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        ret = ""
        for i, m in enumerate(messages):
            content = "<|start_header_id|>" + m["role"] + "<|end_header_id|>\n\n" + m["content"].strip() + "<|eot_id|>"
            if i == 0:
                content = self.bos_token + content
            ret += content
        if add_generation_prompt:
            ret += "<|start_header_id|>assistant<|end_header_id|>\n\n"
        return ret


CONVERSATIONS = [
    [{"from": "human", "value": "<image>\nWhat is in the picture?"}, {"from": "gpt", "value": "A red square."}],
    [{"from": "human", "value": "Describe it.\n<image>"}, {"from": "gpt", "value": "Two circles and a line."},
     {"from": "human", "value": "  How many circles?  "}, {"from": "gpt", "value": " two "}],
    [{"from": "gpt", "value": "skipped: LLaVA drops a leading gpt turn"},
     {"from": "human", "value": "What colour is the sky? <image>"}, {"from": "gpt", "value": "Blue,\nmostly."}],
    [{"from": "human", "value": "A question without an image, with ünïcödé and emoji 🤗"},
     {"from": "gpt", "value": "An answer: 日本語."}],
]


def main():
    llava = load(sys.argv[1], "conv_llava")
    nxt = load(sys.argv[2], "conv_next")
    cases = []
    for conv in CONVERSATIONS:
        turns = conv[1:] if conv[0]["from"] != "human" else conv
        turns = preprocess_multimodal(turns)
        answers = [t["value"] for t in turns if t["from"] == "gpt"]
        # vicuna_v1
        c = llava.conv_templates["vicuna_v1"].copy()
        c.messages = []
        for t in turns:
            c.append_message(c.roles[0] if t["from"] == "human" else c.roles[1], t["value"])
        cases.append({"template": "vicuna_v1", "conversations": conv, "text": c.get_prompt(),
                      "supervised": [" " + a + c.sep2 for a in answers]})
        # chatml (LLaVA-NeXT's conv_qwen)
        c = nxt.conv_templates["qwen_1_5"].copy()
        c.messages = []
        for t in turns:
            c.append_message(c.roles[0] if t["from"] == "human" else c.roles[1], t["value"])
        cases.append({"template": "chatml", "conversations": conv, "text": c.get_prompt(),
                      "supervised": [a + c.sep for a in answers]})
        # llama_3 (LLaVA-NeXT's preprocess_llama3 text)
        tok = Llama3Tokenizer()
        system = nxt.conv_llava_llama_3.system
        text = tok.apply_chat_template([{"role": "system", "content": system}])
        for t in turns:
            role = "user" if t["from"] == "human" else "assistant"
            text += tok.apply_chat_template([{"role": role, "content": t["value"]}])[len(tok.bos_token):]
        cases.append({"template": "llama_3", "conversations": conv, "text": text,
                      "supervised": [a.strip() + "<|eot_id|>" for a in answers]})
        # plain (preprocess_plain) for the two-turn conversations with an image
        if len(turns) == 2 and DEFAULT_IMAGE_TOKEN in turns[0]["value"]:
            cases.append({"template": "plain", "conversations": conv,
                          "text": DEFAULT_IMAGE_TOKEN + turns[1]["value"] + nxt.conv_llava_plain.sep,
                          "supervised": [turns[1]["value"] + nxt.conv_llava_plain.sep]})
    json.dump(cases, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
