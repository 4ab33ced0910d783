#!/usr/bin/env python3
"""Dev-time oracle: write the chat-template fixtures the template tests compare against.

Reads the template corpus `scripts/fetch-templates` caches (llama.cpp's
`models/templates/*.jinja`, from the llama-cpp-python 0.3.36 sdist on PyPI) and writes

- `tests/fixtures/templates/expected-render.jsonl`: one line per (template, case), the
  text Hugging Face transformers' `apply_chat_template` environment renders: Jinja2's
  `ImmutableSandboxedEnvironment` with `trim_blocks`, `lstrip_blocks`, loop controls,
  `tojson` without ASCII escaping, `raise_exception` and `strftime_now` (the clock pinned
  to 2026-01-15 12:00:00), `bos_token` `<BOS>`, `eos_token` `<EOS>`,
  `add_generation_prompt` true. A template that raises gets `error`
  (`TypeName: message`) instead of `output`.
- `tests/fixtures/templates/expected-caps.jsonl` (only with `--llama-server`): the
  capability flags llama.cpp's own prober (`common/jinja/caps.cpp`) reports in
  `/props` for each template, served on any small GGUF with `--chat-template-file`.

Needs `jinja2` (dev only; never a run-time or test dependency):

    python3 -m venv /tmp/tpl && /tmp/tpl/bin/pip install jinja2==3.1.6
    /tmp/tpl/bin/python scripts/make-template-fixtures.py "$(scripts/fetch-templates | tail -1)" \
        [--llama-server PATH/llama-server --model SOME.gguf]

Only the templates listed in TEMPLATES are written: the corpus the tests were built
against. The others in the package stay unseen, to try `toolgate tools parse` and the
derivation on templates nobody wrote a test for.
"""
import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

from jinja2 import ext, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment
from jinja2.exceptions import SecurityError, TemplateError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "templates")

TEMPLATES = [
    "Apertus-8B-Instruct.jinja",
    "Apriel-1.6-15b-Thinker-fixed.jinja",
    "Bielik-11B-v3.0-Instruct.jinja",
    "ByteDance-Seed-OSS.jinja",
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
    "GLM-4.6.jinja",
    "GLM-4.7-Flash.jinja",
    "GigaChat3-10B-A1.8B.jinja",
    "HuggingFaceTB-SmolLM3-3B.jinja",
    "Kimi-K2-Instruct.jinja",
    "LFM2-8B-A1B.jinja",
    "MiMo-VL.jinja",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
    "Qwen-QwQ-32B.jinja",
    "Qwen-Qwen2.5-7B-Instruct.jinja",
    "Qwen-Qwen3-0.6B.jinja",
    "Qwen3.5-4B.jinja",
    "StepFun3.5-Flash.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "deepseek-ai-DeepSeek-V3.1.jinja",
    "fireworks-ai-llama-3-firefunction-v2.jinja",
    "google-gemma-2-2b-it.jinja",
    "google-gemma-4-31B-it.jinja",
    "ibm-granite-granite-3.3-2B-Instruct.jinja",
    "llama-cpp-deepseek-r1.jinja",
    "llama-cpp-rwkv-world.jinja",
    "meetkai-functionary-medium-v3.1.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "meta-llama-Llama-3.3-70B-Instruct.jinja",
    "microsoft-Phi-3.5-mini-instruct.jinja",
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "moonshotai-Kimi-K2.jinja",
    "openai-gpt-oss-120b.jinja",
    "unsloth-mistral-Devstral-Small-2507.jinja",
]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two integers",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
]

CASES = [
    ("plain", {"messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi there"}], "tools": None}),
    ("plain_nosys", {"messages": [
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye"}], "tools": None}),
    ("tools", {"messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS}),
    ("tool_roundtrip", {"messages": [
        {"role": "user", "content": "Weather in Paris, and 2+3?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_0001", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
            {"id": "call_0002", "type": "function",
             "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
        {"role": "tool", "tool_call_id": "call_0001", "name": "get_weather", "content": "{\"temp\": 15}"},
        {"role": "tool", "tool_call_id": "call_0002", "name": "add", "content": "5"},
        {"role": "assistant", "content": "15 degrees, and 5."},
        {"role": "user", "content": "Thanks"}], "tools": TOOLS}),
]

NOW = datetime.datetime(2026, 1, 15, 12, 0, 0)


class Generation(ext.Extension):
    """transformers' `AssistantTracker`: `{% generation %}…{% endgeneration %}` renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def hf_environment(sandbox=ImmutableSandboxedEnvironment):
    """The environment transformers' `_compile_jinja_template` builds."""

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return NOW.strftime(fmt)

    env = sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[ext.loopcontrols, Generation])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def renders(corpus):
    env = hf_environment()
    lines = []
    for name in TEMPLATES:
        with open(os.path.join(corpus, name), encoding="utf-8") as f:
            source = f.read()
        for case, inp in CASES:
            row = {"template": name, "case": case, "bos_token": "<BOS>", "eos_token": "<EOS>",
                   "add_generation_prompt": True}
            try:
                text = env.from_string(source).render(
                    messages=inp["messages"], tools=inp["tools"], bos_token="<BOS>", eos_token="<EOS>",
                    add_generation_prompt=True)
                row["output"] = text
            except Exception as e:  # the template raised, or the sandbox refused
                row["error"] = f"{type(e).__name__}: {e}"
            row["input"] = inp
            lines.append(json.dumps(row, ensure_ascii=False))
    return lines


CALL_TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City"},
            "days": {"type": "integer", "description": "Days"},
            "metric": {"type": "boolean", "description": "Metric units"}},
            "required": ["city", "days"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Time in a zone",
        "parameters": {"type": "object", "properties": {
            "zone": {"type": "string", "description": "Zone"}}, "required": ["zone"]}}},
]
CALLS = [("get_weather", {"city": "Paris", "days": 3}), ("get_time", {"zone": "Europe/Paris"})]
# Nine letters and digits: Mistral's templates refuse any other id.
CALL_IDS = ["a0b2c3d4e", "a1b2c3d4e"]
MARK = "ZZMARKZZ"


def call_turn(env, source, n, string_args, system):
    """The text `source` renders for an assistant turn with the first `n` of CALLS: from
    where the turn's content starts (where a text answer's would: the renders part at a
    marker edge) to the end of the render, cut at the `eos_token`, where generation ends."""
    calls = [{"id": CALL_IDS[i], "type": "function", "function": {
        "name": name, "arguments": json.dumps(args) if string_args else args}}
        for i, (name, args) in enumerate(CALLS[:n])]
    base = [{"role": "user", "content": "Weather in Paris?"}]
    if system:
        base.insert(0, {"role": "system", "content": "You are terse."})

    def render(messages):
        return env.from_string(source).render(messages=messages, tools=CALL_TOOLS, bos_token="<BOS>",
                                              eos_token="<EOS>", add_generation_prompt=False)

    full = render(base + [{"role": "assistant", "content": "", "tool_calls": calls}])
    text = render(base + [{"role": "assistant", "content": MARK}])
    i = 0
    while i < min(len(full), len(text)) and full[i] == text[i]:
        i += 1
    # a marker edge: after `>`, `]`, `}`, `)` or a space, or before `<`, `[`, `{` or a space
    while i > 0 and not (full[i - 1] in ">]})" or full[i - 1].isspace() or full[i] in "<[{" or full[i].isspace()):
        i -= 1
    return full[i:].split("<EOS>")[0]


def call_turns(folders):
    """One line per (template, 1 or 2 calls) of every template in `folders`
    (`{corpus name: folder}`): the call turn jinja2 renders (`text`), or why there is
    none (`skip`): the template raised, renders no call, or renders one call of two."""
    immutable, mutable = hf_environment(), hf_environment(SandboxedEnvironment)
    lines = []
    for corpus, folder in sorted(folders.items()):
        for name in sorted(f for f in os.listdir(folder) if f.endswith(".jinja")):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                source = f.read()
            for n in (1, 2):
                row = {"corpus": corpus, "template": name, "calls": n}
                error, rendered = None, False
                for string_args in (False, True):
                    for system in (True, False):
                        try:
                            try:
                                text = call_turn(immutable, source, n, string_args, system)
                            except SecurityError:
                                # Kimi K2's templates call `list.append`, which the immutable
                                # sandbox refuses: rendered in the mutable one, and said so.
                                text = call_turn(mutable, source, n, string_args, system)
                                row["sandbox"] = "mutable"
                        except Exception as e:  # the template raised, or the sandbox refused
                            error = error or f"{type(e).__name__}: {e}"
                            continue
                        rendered = True
                        if "Paris" in text:
                            row.update(text=text, string_arguments=string_args)
                            break
                    if "text" in row:
                        break
                if "text" in row and n == 2 and "get_time" not in row["text"]:
                    row = {k: v for k, v in row.items() if k not in ("text", "string_arguments", "sandbox")}
                    row["skip"] = "renders one call of two"
                elif "text" not in row:
                    row["skip"] = "renders no call" if rendered or not error else error[:200]
                lines.append(json.dumps(row, ensure_ascii=False))
    return lines


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def caps(corpus, server, model):
    keys = ["supports_object_arguments", "supports_parallel_tool_calls", "supports_preserve_reasoning",
            "supports_reasoning_effort", "supports_string_content", "supports_system_role", "supports_tool_calls",
            "supports_tools", "supports_typed_content"]
    lines = []
    for name in TEMPLATES:
        port = free_port()
        proc = subprocess.Popen([server, "-m", model, "--jinja", "--chat-template-file", os.path.join(corpus, name),
                                 "--port", str(port), "-c", "512", "-t", "1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            props = None
            for _ in range(600):
                try:
                    props = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/props", timeout=2))
                    break
                except Exception:
                    if proc.poll() is not None:
                        break
                    time.sleep(0.1)
            if props is None:
                print(f"FAIL {name}: llama-server did not answer /props", file=sys.stderr)
                continue
            got = props.get("chat_template_caps", {})
            row = {k: bool(got.get(k, False)) for k in keys}
            row["template"] = name
            lines.append(json.dumps(row, sort_keys=True))
        finally:
            proc.terminate()
            proc.wait()
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", help="the folder scripts/fetch-templates prints")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server, for the capability flags")
    ap.add_argument("--model", help="any small GGUF llama-server can load (with --llama-server)")
    ap.add_argument("--vllm", help="the vLLM templates folder scripts/fetch-templates prints: writes "
                    "expected-calls.jsonl for every template of both folders")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "expected-render.jsonl"), "w", encoding="utf-8") as f:
        f.write("\n".join(renders(args.corpus)) + "\n")
    if args.vllm:
        folders = {"llama-cpp-python-0.3.36": args.corpus, "vllm-0.33.0": args.vllm}
        with open(os.path.join(OUT, "expected-calls.jsonl"), "w", encoding="utf-8") as f:
            f.write("\n".join(call_turns(folders)) + "\n")
    if args.llama_server:
        with open(os.path.join(OUT, "expected-caps.jsonl"), "w", encoding="utf-8") as f:
            f.write("\n".join(caps(args.corpus, args.llama_server, args.model)) + "\n")


if __name__ == "__main__":
    main()
