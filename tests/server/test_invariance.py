"""End-to-end batch invariance of `lockstep serve` (docs/serving.md, docs/design.md §1).

The oracle is the same request sent alone, one at a time, to a server with no prefix cache and
no sessions (every prefill cold). Against it: N concurrent clients with different prompts,
lengths, sampling and arrival times (greedy, seeded sampling, speculative with the n-gram
drafter; with and without logprobs), prefix-cache hits, resumed sessions, c = 32 streams, and a tiny KV budget that
answers the excess with 429 + Retry-After. Every loop is bounded; the servers are killed at the
end even on failure. The arrival seed is printed and replayable with LOCKSTEP_TEST_SEED.
"""
import http.client
import json
import os
import random
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai  # noqa: E402
from serve_support import MODEL, serve  # noqa: E402

SEED = int(os.environ.get("LOCKSTEP_TEST_SEED", random.SystemRandom().randrange(1 << 30)))
MODELS = ["--model", f"smol={MODEL}", "--model", f"spec={MODEL}+ngram", "--ctx", "512",
          "--spec-k", "4"]

# (alias, endpoint, body): different prompts, lengths and sampling.
CASES = [
    ("smol", "chat", dict(messages=[{"role": "user", "content": "Name three colours."}],
                          max_tokens=24, temperature=0)),
    ("smol", "chat", dict(messages=[{"role": "system", "content": "Answer in one line."},
                                    {"role": "user", "content": "What is the capital of France?"}],
                          max_tokens=12, temperature=0.8, top_p=0.9, seed=5)),
    ("smol", "chat", dict(messages=[{"role": "user", "content": "Count: one two three"}],
                          max_tokens=30, temperature=1.0, top_k=40, seed=11, presence_penalty=0.5)),
    ("smol", "completions", dict(prompt="The quick brown fox", max_tokens=20, temperature=0,
                                 stop=["."])),
    ("smol", "completions", dict(prompt="1, 2, 3, 4,", max_tokens=16, temperature=0.7, seed=2,
                                 min_p=0.05, frequency_penalty=0.3)),
    ("spec", "chat", dict(messages=[{"role": "user", "content": "Repeat: red green blue red green blue"}],
                          max_tokens=28, temperature=0)),
    ("spec", "chat", dict(messages=[{"role": "user", "content": "Write a short list of fruits."}],
                          max_tokens=20, temperature=0.9, seed=9)),
    ("spec", "completions", dict(prompt="a b c a b c a b c", max_tokens=24, temperature=0)),
]


EXTENSIONS = ("top_k", "min_p", "repetition_penalty", "session_id")


def send(client, alias, endpoint, body, stream=False):
    extra = {k: v for k, v in body.items() if k in EXTENSIONS}
    body = {k: v for k, v in body.items() if k not in EXTENSIONS}
    if extra:
        body["extra_body"] = extra
    if endpoint == "chat":
        r = client.chat.completions.create(model=alias, stream=stream, **body)
        if stream:
            return "".join(ch.choices[0].delta.content or "" for ch in r if ch.choices)
        return r.choices[0].message.content
    r = client.completions.create(model=alias, stream=stream, **body)
    if stream:
        return "".join(ch.choices[0].text for ch in r if ch.choices)
    return r.choices[0].text


def concurrently(fns, timeout=240):
    out, errs = [None] * len(fns), []

    def run(i):
        try:
            out[i] = fns[i]()
        except Exception as e:  # noqa: BLE001 - reported below
            errs.append((i, repr(e)))
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(fns))]
    for t in threads:
        t.start()
    deadline = time.time() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.time()))
    alive = [i for i, t in enumerate(threads) if t.is_alive()]
    return out, errs, alive


def spec_metrics(text, model="spec"):
    """The load-aware K policy's series of `model` in a /metrics text: the K served, and
    sequences and rounds by the K they drafted with."""
    out = {"k": None, "sequences": {}, "rounds": {}}
    for ln in text.splitlines():
        name, _, value = ln.rpartition(" ")
        if name == f'lockstep_spec_k{{model="{model}"}}':
            out["k"] = int(value)
        for series in ("sequences", "rounds"):
            prefix = f'lockstep_spec_{series}_total{{model="{model}",k="'
            if name.startswith(prefix):
                out[series][int(name[len(prefix):].split('"')[0])] = int(value)
    return out


class Invariance(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        print(f"arrival seed {SEED} (replay: LOCKSTEP_TEST_SEED={SEED})", flush=True)
        with serve(*MODELS, "--prefix-cache-mb", "0", "--max-sessions", "0") as cold:
            c = cold.client()
            cls.ref = [send(c, a, e, b) for a, e, b in CASES]
            _, _, cls.ref_metrics = cold.get("/metrics")
            turn1 = [{"role": "user", "content": "Give me a word."}]
            cls.turn1_ref = send(c, "smol", "chat", dict(messages=turn1, max_tokens=8, temperature=0))
            cls.turn2_msgs = turn1 + [{"role": "assistant", "content": cls.turn1_ref},
                                      {"role": "user", "content": "Another one."}]
            cls.turn2_ref = send(c, "smol", "chat", dict(messages=cls.turn2_msgs, max_tokens=8,
                                                         temperature=0))
        for r in cls.ref:
            assert r, "a reference reply is empty"

    def test_concurrent_clients_equal_alone(self):
        rng = random.Random(SEED)
        # 8 slots: once 4 are taken, the load-aware policy drafts with K = 2 instead of 4.
        with serve(*MODELS, "--prefix-cache-mb", "32", "--max-seqs", "8") as srv:
            c = srv.client()
            # Two rounds of all cases at once; the second round's prompts can hit the prefix
            # cache the first round filled.
            for rnd in range(2):
                jobs = []
                for i, (a, e, b) in enumerate(CASES):
                    delay, stream = rng.uniform(0, 0.5), rng.random() < 0.5
                    # With logprobs the host picks a greedy token from the row; without (the
                    # reference) the backend does (docs/runtime.md): the same text either way.
                    if rng.random() < 0.5:
                        b = dict(b, logprobs=True if e == "chat" else 1)

                    def job(a=a, e=e, b=b, delay=delay, stream=stream):
                        time.sleep(delay)
                        return send(c, a, e, b, stream)
                    jobs.append((i, job))
                out, errs, alive = concurrently([j for _, j in jobs])
                self.assertEqual(errs, [])
                self.assertEqual(alive, [])
                for k, (i, _) in enumerate(jobs):
                    self.assertEqual(out[k], self.ref[i],
                                     f"round {rnd} case {i} ({CASES[i][0]}, {CASES[i][1]})")
            _, _, metrics = srv.get("/metrics")
            hits = [ln for ln in metrics.splitlines()
                    if ln.startswith("lockstep_prefix_cache_hits_total")]
            self.assertTrue(any(int(ln.split()[-1]) > 0 for ln in hits), hits)
            drafted = [ln for ln in metrics.splitlines()
                       if ln.startswith("lockstep_spec_drafted_total{model=\"spec\"")]
            self.assertTrue(any(int(ln.split()[-1]) > 0 for ln in drafted), drafted)

    def test_lowered_k_under_load_equals_alone(self):
        # The references drafted alone with K = 4 (--spec-k), as their server's metrics say.
        ref = spec_metrics(self.ref_metrics)
        self.assertEqual(ref["k"], 4)
        self.assertEqual(set(ref["sequences"]), {4}, ref)
        self.assertGreater(ref["rounds"][4], 0)
        # 6 slots: with 3 or more taken, a new request drafts with K = 2. Three long sampled
        # requests on the drafted model hold 3 slots; the spec cases then arrive together.
        with serve(*MODELS, "--prefix-cache-mb", "0", "--max-sessions", "0",
                   "--max-seqs", "6") as srv:
            blockers = []
            for i in range(3):
                conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
                conn.request("POST", "/v1/completions", json.dumps(dict(
                    model="spec", prompt=f"Story {i}:", max_tokens=400, temperature=1.0, seed=i,
                    stream=True, logit_bias={"0": -100, "1": -100, "2": -100})),
                    {"Content-Type": "application/json"})
                self.assertEqual(conn.getresponse().status, 200)  # admitted: its slot is taken
                blockers.append(conn)
            cases = [i for i, (a, _, _) in enumerate(CASES) if a == "spec"]
            c = srv.client()
            out, errs, alive = concurrently(
                [lambda i=i, st=st: send(c, *CASES[i], stream=st)
                 for i, st in zip(cases, [False, True, False])])
            self.assertEqual((errs, alive), ([], []))
            _, _, text = srv.get("/metrics")
            # The blockers still hold their slots (none finished: the K of every case was picked
            # under load), and each case drafted with K = 2.
            self.assertIn('lockstep_admitted_sequences{model="spec"} 3', text)
            got = spec_metrics(text)
            self.assertEqual(got["sequences"], {2: len(cases)}, text)
            self.assertGreater(got["rounds"][2], 0)
            for conn in blockers:
                conn.close()
            for k, i in enumerate(cases):
                self.assertEqual(out[k], self.ref[i], f"case {i} drafted with K = 2 under load")

    def test_prefix_hit_and_resumed_session_equal_cold(self):
        with serve(*MODELS, "--prefix-cache-mb", "32") as srv:
            c = srv.client()
            a, e, b = CASES[0]
            self.assertEqual(send(c, a, e, b), self.ref[0])
            self.assertEqual(send(c, a, e, b), self.ref[0])  # a prefix-cache hit
            _, _, m = srv.get("/metrics")
            self.assertIn('lockstep_prefix_cache_hits_total{model="smol"} 1', m)
            t1 = c.chat.completions.create(model="smol", max_tokens=8, temperature=0,
                                           messages=self.turn2_msgs[:1],
                                           extra_body={"session_id": "conv-1"})
            self.assertEqual(t1.choices[0].message.content, self.turn1_ref)
            t2 = c.chat.completions.with_raw_response.create(
                model="smol", max_tokens=8, temperature=0, messages=self.turn2_msgs,
                extra_headers={"X-Session-Id": "conv-1"})
            self.assertEqual(t2.parse().choices[0].message.content, self.turn2_ref)
            _, _, m = srv.get("/metrics")
            self.assertIn('lockstep_session_resumes_total{model="smol"} 1', m)

    def test_32_streams_no_errors_no_losses(self):
        n_req = 48
        with serve("--model", f"smol={MODEL}", "--ctx", "512", "--max-seqs", "32") as srv:
            c = srv.client()
            a, e, b = CASES[0]
            body = dict(b, max_tokens=8)
            alone = send(c, a, e, body)
            sem = threading.Semaphore(32)

            def job():
                with sem:
                    return send(c, a, e, body, stream=True)
            out, errs, alive = concurrently([job] * n_req, timeout=300)
            self.assertEqual(errs, [])
            self.assertEqual(alive, [])
            self.assertEqual(out, [alone] * n_req)

    def test_tiny_kv_budget_answers_429_and_completes_every_admitted(self):
        # 12 MiB of f32 KV for SmolLM2 is 17 blocks of 16 tokens: one 256-token context, and
        # about five of these requests at once.
        with serve("--model", f"smol={MODEL}", "--ctx", "256", "--kv-mb", "12") as srv:
            a, e, b = CASES[0]
            body = dict(model=a, max_tokens=16, **{k: v for k, v in b.items() if k != "max_tokens"})
            status, _, alone = srv.post("/v1/chat/completions", body)
            self.assertEqual(status, 200, alone)
            out, errs, alive = concurrently(
                [lambda: srv.post("/v1/chat/completions", body)] * 16)
            self.assertEqual((errs, alive), ([], []))
            codes = sorted(s for s, _, _ in out)
            self.assertIn(429, codes)
            self.assertIn(200, codes)
            self.assertEqual(set(codes), {200, 429})
            for status, hdrs, r in out:
                if status == 429:
                    self.assertEqual(hdrs.get("Retry-After"), "1")
                    self.assertEqual(r["error"]["code"], "server_busy")
                else:
                    self.assertEqual(r["choices"][0]["message"]["content"],
                                     alone["choices"][0]["message"]["content"])
            print(f"tiny KV: {codes.count(200)} admitted, {codes.count(429)} refused with 429")


if __name__ == "__main__":
    unittest.main(verbosity=2)
