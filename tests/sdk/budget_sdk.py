"""What agents send, through the official SDKs: tight token budgets, the `developer`
role and OpenAI's legacy `function` messages.

usage: python budget_sdk.py BASE_URL MODEL_ID

- For every `max_tokens` from 1 to 64, with `tool_choice` forced and `auto`, on Chat
  Completions (and a spread of budgets on the Responses and Anthropic Messages APIs):
  a call is returned only with exactly the arguments an unbounded run writes (the
  budget never completes a call with values the model did not write), and a turn with
  no complete call says the budget ended it (`length`, `incomplete` /
  `max_output_tokens`, `max_tokens`). A forced call the budget cannot hold at all is
  refused with a 400 naming `max_tokens`.
- A `developer` message is in the prompt and steers the answer exactly as the same
  text as `system` does; a legacy `function` result is in the prompt as the `tool`
  result is.
- `/metrics` counts the cut calls.
Exits non-zero with the failing assertion; prints `ok errors` last.
"""
import json
import sys
import urllib.request

import anthropic
import openai
from openai import OpenAI

base, model = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)
claude = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0, timeout=300)

PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city",
                                           "parameters": PARAMS}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def chat(max_tokens, choice):
    try:
        r = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice=choice,
                                           temperature=0, max_tokens=max_tokens)
    except openai.BadRequestError as e:
        return "refused", str(e), []
    c = r.choices[0]
    calls = [(t.function.name, json.loads(t.function.arguments)) for t in c.message.tool_calls or []]
    return c.finish_reason, c.message.content, calls


# The unbounded answers: what the model writes when nothing cuts it.
reference = {}
for choice in ["required", "auto"]:
    finish, _, calls = chat(None, choice)
    assert finish == "tool_calls" and len(calls) == 1, (choice, finish, calls)
    reference[choice] = calls[0]
print("unbounded:", reference)

cut = {"required": 0, "auto": 0}
for choice in ["required", "auto"]:
    for n in range(1, 65):
        finish, content, calls = chat(n, choice)
        if finish == "refused":
            assert choice == "required" and "max_tokens" in content, (n, content)
            continue
        assert all(c == reference[choice] for c in calls), f"{choice} max_tokens={n}: invented {calls}"
        if calls:
            assert finish == "tool_calls", (choice, n, finish)
        else:
            assert finish == "length", f"{choice} max_tokens={n}: no call and finish {finish!r}"
            cut[choice] += 1
            # The cut call is not handed over as text either.
            assert not content or "get_weather" not in content or "{" not in content or n <= 8, (n, content)
print("cut (no call, finish length):", cut)
assert cut["required"] > 0 and cut["auto"] > 0, cut

# Responses API: `incomplete` with reason max_output_tokens, or the very same call.
for n in [4, 10, 16, 20, 24, 40]:
    r = client.responses.create(model=model, input="What is the weather in Paris?", temperature=0,
                                tools=[{"type": "function", "name": "get_weather", "parameters": PARAMS}],
                                tool_choice="auto", max_output_tokens=n)
    calls = [(o.name, json.loads(o.arguments)) for o in r.output if o.type == "function_call"]
    assert all(c == reference["auto"] for c in calls), (n, calls)
    if not calls:
        assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens", (n, r.status)

# Anthropic Messages: `max_tokens` stop, or the very same call.
for n in [4, 10, 16, 20, 24, 40]:
    for choice in [{"type": "auto"}, {"type": "any"}]:
        try:
            m = claude.messages.create(model=model, max_tokens=n, extra_body={"temperature": 0}, messages=ASK, tool_choice=choice,
                                       tools=[{"name": "get_weather", "input_schema": PARAMS}])
        except anthropic.BadRequestError as e:
            assert choice["type"] == "any" and "max_tokens" in str(e), (n, e)
            continue
        uses = [(b.name, b.input) for b in m.content if b.type == "tool_use"]
        assert all(u == reference["auto"] or u == reference["required"] for u in uses), (n, choice, uses)
        if not uses:
            assert m.stop_reason == "max_tokens", (n, choice, m.stop_reason)

# `developer` is the template's system role here: the same prompt, the same answer.
def answer(messages):
    r = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=24)
    return r.usage.prompt_tokens, r.choices[0].message.content


question = {"role": "user", "content": "Name one famous landmark of Paris."}
plain = answer([question])
as_system = answer([{"role": "system", "content": "Answer in French."}, question])
as_developer = answer([{"role": "developer", "content": "Answer in French."}, question])
assert as_developer == as_system, (as_developer, as_system)
assert as_developer[0] != plain[0], "the developer message is in the prompt (in place of the default system text)"

# A legacy `function` result is rendered as a `tool` result.
legacy = answer([*ASK, {"role": "assistant", "content": None,
                        "function_call": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                 {"role": "function", "name": "get_weather", "content": "{\"temp_c\": 21, \"sky\": \"clear\"}"}])
modern = answer([*ASK, {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_legacy_0", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                 {"role": "tool", "tool_call_id": "call_legacy_0", "content": "{\"temp_c\": 21, \"sky\": \"clear\"}"}])
assert legacy == modern, (legacy, modern)

metrics = urllib.request.urlopen(f"{base}/metrics").read().decode()
cut_total = next(float(l.split()[-1]) for l in metrics.splitlines() if l.startswith("toolgate_tool_calls_cut_total"))
assert cut_total >= cut["required"] + cut["auto"], (cut_total, cut)
print("ok errors")
