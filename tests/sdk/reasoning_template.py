"""Drive a toolgate server whose template reasons (Qwen 3.5's: the generation prompt
opens `<think>`) through the official Anthropic and OpenAI Python SDKs: `thinking`
blocks and `thinking_delta` events, `thinking: disabled` and `chat_template_kwargs`
reaching the template, thinking blocks sent back in the history, and structured
output after the reasoning.

usage: python reasoning_template.py BASE_URL MODEL_ID
"""
import json
import sys

import anthropic
import pydantic
from openai import OpenAI

base, model = sys.argv[1], sys.argv[2]
client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0, timeout=300)
T0 = {"temperature": 0}
Q = [{"role": "user", "content": "What is 2+2?"}]
ON = {"type": "enabled", "budget_tokens": 1024}

# Enabled: the reasoning comes first as a thinking block with a signature.
m = client.messages.create(model=model, max_tokens=40, extra_body=T0, thinking=ON, messages=Q)
assert m.content and m.content[0].type == "thinking", m
thought = m.content[0]
assert thought.thinking.strip() and thought.signature, thought
assert "<think>" not in thought.thinking and all(b.type != "text" or "<think>" not in b.text for b in m.content), m
print("ok thinking:", repr(thought.thinking[:60]))

# Streamed: thinking_delta events add up to the same block, closed by its signature.
deltas = 0
with client.messages.stream(model=model, max_tokens=40, extra_body=T0, thinking=ON, messages=Q) as s:
    for ev in s:
        if ev.type == "content_block_delta" and ev.delta.type == "thinking_delta":
            deltas += 1
    final = s.get_final_message()
assert final.content[0].type == "thinking", final
assert final.content[0].thinking == thought.thinking and final.content[0].signature == thought.signature, final
assert deltas > 1, deltas
print("ok streamed thinking:", deltas, "thinking deltas")

# Not asked for: the reasoning stays out of the answer.
hidden = client.messages.create(model=model, max_tokens=40, extra_body=T0, messages=Q)
assert all(b.type != "thinking" for b in hidden.content), hidden

# Disabled: the template closes the block itself (enable_thinking false) and the
# model answers in text; count_tokens renders the same prompt.
off = client.messages.create(model=model, max_tokens=20, extra_body=T0, thinking={"type": "disabled"}, messages=Q)
assert [b.type for b in off.content] == ["text"] and off.content[0].text.strip(), off
off_count = client.messages.count_tokens(model=model, messages=Q, thinking={"type": "disabled"}).input_tokens
on_count = client.messages.count_tokens(model=model, messages=Q, thinking=ON).input_tokens
assert off_count == off.usage.input_tokens and on_count == m.usage.input_tokens and off_count > on_count, \
    (off_count, on_count, off.usage, m.usage)
print("ok disabled:", repr(off.content[0].text), f"({off_count} prompt tokens, {on_count} with thinking)")

# The thinking block goes back in the history (as clients send it) and is accepted.
again = client.messages.create(model=model, max_tokens=20, extra_body=T0, thinking=ON, messages=Q + [
    {"role": "assistant", "content": [thought.model_dump(), {"type": "text", "text": "4"}]},
    {"role": "user", "content": "And 3+3?"},
])
assert again.content and again.content[0].type == "thinking", again
print("ok history with thinking")


# Structured output after the reasoning: the model finishes thinking, then the text is
# one JSON value of the schema. SmolLM2 repeats "The answer is 4." in its thinking until
# the budget ends it: then there is no answer, and none is made up for it (the budget
# never closes the block and writes the shortest JSON in the model's place).
class Answer(pydantic.BaseModel):
    answer: int


parsed = client.messages.parse(model=model, max_tokens=80, extra_body=T0, thinking=ON, output_format=Answer,
                               messages=Q)
if parsed.stop_reason == "max_tokens":
    assert [b.type for b in parsed.content] == ["thinking"] and parsed.parsed_output is None, parsed
    print("ok structured after thinking: cut in the thinking, no answer invented")
else:
    assert isinstance(parsed.parsed_output, Answer), parsed
    assert [b.type for b in parsed.content] == ["thinking", "text"], parsed
    print("ok structured after thinking:", parsed.parsed_output)

# OpenAI: chat_template_kwargs reaches the template (llama.cpp's and vLLM's name).
oa = OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)
kw = dict(model=model, messages=Q, temperature=0, max_tokens=20)
thinks = oa.chat.completions.create(**kw).choices[0].message
plain = oa.chat.completions.create(**kw, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
msg = plain.choices[0].message
assert getattr(thinks, "reasoning_content", None), thinks
assert not getattr(msg, "reasoning_content", None) and msg.content.strip(), msg
assert plain.usage.prompt_tokens == off_count, (plain.usage, off_count)
print("ok chat_template_kwargs:", repr(msg.content))
print("ok errors")
