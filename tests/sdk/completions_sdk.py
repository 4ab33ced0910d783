"""Drive `/v1/completions` (legacy text completion) with the official OpenAI Python SDK
on a coder model with fill-in-the-middle tokens (Qwen 2.5 Coder): text and token
prompts, streaming, logprobs, echo, stop, and `suffix` → FIM.

usage: python completions_sdk.py BASE_URL MODEL_ID
"""
import json
import sys
import urllib.request

import openai
from openai import OpenAI

base, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)


def tokenize(text, special):
    req = urllib.request.Request(f"{base}/tokenize", headers={"content-type": "application/json"},
                                 data=json.dumps({"content": text, "add_special": True,
                                                  "parse_special": special}).encode())
    return json.load(urllib.request.urlopen(req))["tokens"]


PROMPT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
kw = dict(model=model, max_tokens=24, temperature=0)

# A text prompt is continued verbatim (the indentation of the next line included).
r = client.completions.create(prompt=PROMPT, **kw)
text = r.choices[0].text
assert r.object == "text_completion" and r.choices[0].finish_reason == "length", r
assert text.startswith("    ") and text.strip(), repr(text)
assert r.usage.prompt_tokens == len(tokenize(PROMPT, True)) and r.usage.completion_tokens == 24, r.usage
print("ok text prompt:", repr(text))

# Streamed: the chunks add up to the same text; token ids give the same completion.
streamed = "".join(c.choices[0].text for c in client.completions.create(prompt=PROMPT, stream=True, **kw)
                   if c.choices)
assert streamed == text, (streamed, text)
ids = tokenize(PROMPT, True)
assert client.completions.create(prompt=ids, **kw).choices[0].text == text
print("ok streamed and token prompt")

# logprobs: one entry per token, in the legacy shape; echo puts the prompt first.
lp = client.completions.create(prompt=PROMPT, logprobs=2, **kw).choices[0]
assert "".join(lp.logprobs.tokens) == lp.text == text, (lp.logprobs.tokens, text)
assert len(lp.logprobs.token_logprobs) == 24 and all(x <= 0 for x in lp.logprobs.token_logprobs)
assert all(1 <= len(t) <= 2 for t in lp.logprobs.top_logprobs), lp.logprobs.top_logprobs
assert lp.logprobs.text_offset[0] == len(PROMPT), lp.logprobs.text_offset
echo = client.completions.create(prompt=PROMPT, echo=True, **kw).choices[0].text
assert echo == PROMPT + text, repr(echo)
cut = client.completions.create(prompt=PROMPT, stop=[":"], **kw).choices[0]
assert cut.finish_reason == "stop" and cut.text == text[:text.index(":")], cut
print("ok logprobs, echo, stop")

# suffix → fill in the middle: the prompt is <|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>,
# exactly what a client spelling those tokens would send.
PREFIX, SUFFIX = "def add(a, b):\n    ", "\n\nprint(add(1, 2))\n"
fim = client.completions.create(prompt=PREFIX, suffix=SUFFIX, **kw)
manual = client.completions.create(prompt=f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>", **kw)
assert fim.choices[0].text == manual.choices[0].text, (fim, manual)
assert fim.usage.prompt_tokens == manual.usage.prompt_tokens == len(tokenize(PREFIX, False)) + len(tokenize(SUFFIX, False)) + 3
assert fim.choices[0].text.startswith("return a + b"), repr(fim.choices[0].text)
print("ok suffix (FIM):", repr(fim.choices[0].text))

for bad in [dict(prompt=["a", "b"]), dict(prompt=PROMPT, n=2), dict(prompt=PROMPT, logprobs=9)]:
    try:
        client.completions.create(model=model, max_tokens=4, **bad)
        raise AssertionError(f"expected BadRequestError for {bad}")
    except openai.BadRequestError:
        pass
print("ok errors")
