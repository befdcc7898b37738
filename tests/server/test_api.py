"""The OpenAI surface of `lockstep serve`, driven by the unmodified `openai` client.

Oracles: `lockstep run` (the CLI's own driver of the engine, one request alone) for what a reply
says; OpenAI's documented shapes for errors and streams; hashlib for the API-key hashing; exact
arithmetic on logprobs. docs/serving.md.
"""
import hashlib
import json
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai  # noqa: E402
from serve_support import MODEL, run_cli, serve  # noqa: E402

PROMPT = "Name three colours."


class Api(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ctx = serve("--model", f"smol={MODEL}", "--ctx", "512", "--max-body-kb", "64",
                        "--max-seqs", "8")
        cls.srv = cls.ctx.__enter__()
        cls.c = cls.srv.client()

    @classmethod
    def tearDownClass(cls):
        cls.ctx.__exit__(None, None, None)

    def chat(self, **kw):
        args = dict(model="smol", messages=[{"role": "user", "content": PROMPT}], max_tokens=24,
                    temperature=0)
        args.update(kw)
        return self.c.chat.completions.create(**args)

    def test_chat_greedy_equals_lockstep_run(self):
        r = self.chat()
        ref = json.loads(run_cli("run", MODEL, "--chat", "--prompt", PROMPT, "-n", "24", "--json", "-q"))
        self.assertEqual(r.choices[0].message.content, ref["text"])
        self.assertEqual(r.choices[0].finish_reason, ref["finish_reason"])
        self.assertEqual(r.usage.prompt_tokens, ref["prompt_tokens"])
        self.assertEqual(r.usage.completion_tokens, len(ref["tokens"]))

    def test_completions_equal_lockstep_run(self):
        r = self.c.completions.create(model="smol", prompt="Once upon a time", max_tokens=16,
                                      temperature=0)
        ref = json.loads(run_cli("run", MODEL, "--prompt", "Once upon a time", "-n", "16", "--json", "-q"))
        self.assertEqual(r.choices[0].text, ref["text"])
        self.assertEqual(r.usage.prompt_tokens, ref["prompt_tokens"])

    def test_stream_concatenates_to_the_reply(self):
        whole = self.chat(max_tokens=20).choices[0].message.content
        chunks = list(self.chat(max_tokens=20, stream=True, stream_options={"include_usage": True}))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        self.assertEqual(text, whole)
        self.assertGreater(len(chunks), 3)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertIsNotNone([ch for ch in chunks if ch.choices and ch.choices[0].finish_reason][0])
        self.assertEqual(chunks[-1].choices, [])
        self.assertGreater(chunks[-1].usage.completion_tokens, 0)
        ctext = "".join(ch.choices[0].text for ch in self.c.completions.create(
            model="smol", prompt="Once upon a time", max_tokens=12, temperature=0, stream=True))
        self.assertEqual(ctext, self.c.completions.create(
            model="smol", prompt="Once upon a time", max_tokens=12, temperature=0).choices[0].text)

    def test_n_choices_are_the_requests_with_seed_plus_i_alone(self):
        r = self.chat(n=3, temperature=0.9, seed=41, max_tokens=16)
        self.assertEqual(len(r.choices), 3)
        for i, ch in enumerate(r.choices):
            alone = self.chat(temperature=0.9, seed=41 + i, max_tokens=16).choices[0].message.content
            self.assertEqual(ch.message.content, alone, f"choice {i}")
        self.assertEqual(r.usage.prompt_tokens, self.chat(max_tokens=1).usage.prompt_tokens)

    def test_seed_replays_and_another_seed_differs(self):
        a = self.chat(temperature=1.0, seed=7, max_tokens=32).choices[0].message.content
        b = self.chat(temperature=1.0, seed=7, max_tokens=32).choices[0].message.content
        c = self.chat(temperature=1.0, seed=8, max_tokens=32).choices[0].message.content
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)

    def test_logprobs(self):
        r = self.chat(logprobs=True, top_logprobs=3, max_tokens=12)
        content = r.choices[0].logprobs.content
        self.assertGreater(len(content), 0)
        self.assertEqual("".join(e.token for e in content), r.choices[0].message.content)
        for e in content:
            self.assertEqual(len(e.top_logprobs), 3)
            self.assertEqual(e.top_logprobs[0].token, e.token)  # greedy: the argmax
            self.assertEqual(e.top_logprobs[0].logprob, e.logprob)
            self.assertLessEqual(sum(math.exp(t.logprob) for t in e.top_logprobs), 1 + 1e-9)
            self.assertTrue(all(t.logprob <= 0 for t in e.top_logprobs))
            self.assertEqual(bytes(e.bytes).decode(errors="replace"), e.token)
        # Sampled: the token's logprob is its probability in the law it was drawn from (< 0).
        s = self.chat(logprobs=True, top_logprobs=2, temperature=1.0, seed=3, max_tokens=8)
        self.assertTrue(any(e.logprob < 0 for e in s.choices[0].logprobs.content))
        cr = self.c.completions.create(model="smol", prompt="Once upon a time", max_tokens=6,
                                       temperature=0, logprobs=2)
        self.assertEqual("".join(cr.choices[0].logprobs.tokens), cr.choices[0].text)
        self.assertEqual(len(cr.choices[0].logprobs.top_logprobs[0]), 2)

    def test_stop_string_cuts_the_unstopped_reply(self):
        full = self.chat(max_tokens=24).choices[0].message.content
        words = full.split()
        self.assertGreater(len(words), 3, full)
        stop = words[2]
        r = self.chat(max_tokens=24, stop=[stop])
        self.assertEqual(r.choices[0].message.content, full[:full.index(stop)])
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def assertApiError(self, fn, status, param, code=None, needle=None):
        with self.assertRaises(openai.APIStatusError) as cm:
            fn()
        e = cm.exception
        self.assertEqual(e.status_code, status, e.body)
        self.assertEqual(e.body["param"] if isinstance(e.body, dict) else None, param, e.body)
        if code:
            self.assertEqual(e.body["code"], code, e.body)
        if needle:
            self.assertIn(needle, e.body["message"])
        return e

    def test_errors_name_the_field(self):
        self.assertApiError(lambda: self.chat(temperature=5), 400, "temperature")
        self.assertApiError(lambda: self.chat(top_p=0), 400, "top_p")
        self.assertApiError(lambda: self.chat(n=0), 400, "n")
        self.assertApiError(lambda: self.chat(top_logprobs=30, logprobs=True), 400, "top_logprobs")
        self.assertApiError(lambda: self.chat(logit_bias={"99999999": 1}), 400, "logit_bias")
        self.assertApiError(lambda: self.chat(extra_body={"temperature": "hot"}), 400, "temperature",
                            "invalid_type")
        self.assertApiError(lambda: self.chat(extra_body={"frobnicate": 1}), 400, "frobnicate",
                            "unsupported_parameter")
        self.assertApiError(lambda: self.chat(messages=[{"role": "wizard", "content": "x"}]), 400,
                            "messages[0].role")
        self.assertApiError(lambda: self.chat(model="nope"), 404, "model", "model_not_found")
        e = self.assertApiError(lambda: self.chat(messages=[{"role": "user", "content": "word " * 600}]),
                                400, "messages", "context_length_exceeded")
        self.assertIn("512", e.body["message"])  # both numbers: the prompt's and the context's
        self.assertRegex(e.body["message"], r"is 6\d\d tokens")
        self.assertApiError(lambda: self.chat(max_tokens=600), 400, "max_completion_tokens",
                            "context_length_exceeded", "exceeds the context length 512")

    def test_raw_errors(self):
        status, _, body = self.srv.post("/v1/chat/completions", '{"model": "smol", "messages": [')
        self.assertEqual(status, 400)
        self.assertEqual(body["error"]["code"], "invalid_json")
        self.assertEqual(set(body["error"]), {"message", "type", "param", "code"})
        status, _, body = self.srv.post("/v1/chat/completions", {"model": "smol", "messages": "hi"})
        self.assertEqual((status, body["error"]["param"]), (400, "messages"))
        status, _, body = self.srv.post("/v1/completions", b"x" * (100 << 10))
        self.assertEqual(status, 413)
        self.assertEqual(body["error"]["code"], "body_too_large")
        self.assertIn(str(64 << 10), body["error"]["message"])
        status, _, body = self.srv.post("/v1/completions", [1, 2])
        self.assertEqual((status, body["error"]["param"]), (400, "body"))
        status, _, _ = self.srv.get("/health")
        self.assertEqual(status, 200)
        status, _, _ = self.srv.get("/ready")
        self.assertEqual(status, 200)

    def test_models_and_metrics(self):
        models = self.c.models.list().data
        self.assertEqual([m.id for m in models], ["smol"])
        facts = models[0].model_extra["lockstep"]
        with open(facts["file"], "rb") as f:
            self.assertEqual(facts["sha256"], hashlib.sha256(f.read()).hexdigest()[:16])
        self.assertEqual(facts["context"], 512)
        self.chat(max_tokens=2)
        status, _, text = self.srv.get("/metrics")
        self.assertEqual(status, 200)
        for series in ["lockstep_requests_total{endpoint=\"chat\",status=\"200\"}",
                       "lockstep_time_to_first_token_seconds_bucket",
                       "lockstep_inter_token_latency_seconds_bucket", "lockstep_prompt_tokens_total",
                       "lockstep_generated_tokens_total", "lockstep_queue_depth{model=\"smol\"}",
                       "lockstep_kv_blocks_used{model=\"smol\"}", "lockstep_kv_blocks_free{model=\"smol\"}",
                       "lockstep_prefix_cache_hits_total{model=\"smol\"}",
                       "lockstep_prefix_cache_misses_total{model=\"smol\"}"]:
            self.assertIn(series, text)


class Auth(unittest.TestCase):
    def test_keys_hashed_401_and_never_logged(self):
        key = "sk-test-" + hashlib.sha256(b"lockstep").hexdigest()[:20]
        with tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False) as f:
            f.write("other-key\n" + key + "\n")
        with serve("--model", f"smol={MODEL}", "--ctx", "256", "--api-key-file", f.name) as srv:
            for bad in ["none", key + "x"]:
                with self.assertRaises(openai.AuthenticationError) as cm:
                    srv.client(api_key=bad).chat.completions.create(
                        model="smol", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
                self.assertEqual(cm.exception.body["code"], "invalid_api_key")
            status, _, _ = srv.get("/metrics")
            self.assertEqual(status, 401)
            r = srv.client(api_key=key).chat.completions.create(
                model="smol", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
            self.assertEqual(len(r.choices), 1)
            self.assertNotIn(key, srv.text())


class Hybrid(unittest.TestCase):
    def test_hybrid_model_served_without_prefix_cache(self):
        # A hybrid (Gated DeltaNet) model: the prefix cache cannot hold recurrent state, so serve
        # boots it with the cache off and says so; asking for the cache stops the boot by name.
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))), "golden", "families", "qwen3_5", "qwen3_5.gguf")
        with serve("--model", f"hy={path}", "--ctx", "128") as srv:
            self.assertIn("prefix cache 0 MiB (recurrent layers)", srv.text())
            status, _, models = srv.get("/v1/models")
            self.assertEqual(status, 200)
            self.assertEqual(models["data"][0]["lockstep"]["prefix_cache_mb"], 0)
            r = srv.client().completions.create(model="hy", prompt="the cat", max_tokens=8,
                                                temperature=0)
            ref = json.loads(run_cli("run", path, "--prompt", "the cat", "-n", "8", "--json",
                                     "-q", "--ctx", "128"))
            self.assertEqual(r.choices[0].text, ref["text"])
        with self.assertRaises(RuntimeError) as cm:
            with serve("--model", f"hy={path}", "--ctx", "128", "--prefix-cache-mb", "8"):
                pass
        self.assertIn("recurrent (Gated DeltaNet) layers", str(cm.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
