"""Client disconnect cancels and frees KV blocks; SIGTERM drains (running streams finish, new
requests get 503, exit 0); boot errors name the flag, variable or file (docs/serving.md).
Oracles: the server's own /metrics gauges read against the pool's size (every block free when
nothing runs and nothing is cached), the process exit status, OpenAI's stream shape."""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_support import BIN, MODEL, serve  # noqa: E402

BODY = {"model": "smol", "messages": [{"role": "user", "content": "Tell me a long story."}],
        "temperature": 0, "stream": True}


def metric(srv, name, absent=None):
    """The value of the series `name` (with its labels); `absent` when it is not there yet, or
    a failure when no default is given."""
    _, _, text = srv.get("/metrics")
    for ln in text.splitlines():
        if ln.startswith(name + " "):
            return int(float(ln.split()[-1]))
    if absent is not None:
        return absent
    raise AssertionError(f"{name} not in /metrics")


def open_stream(srv, body):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    return conn, resp


class Lifecycle(unittest.TestCase):
    def test_disconnect_cancels_and_frees_blocks(self):
        with serve("--model", f"smol={MODEL}", "--ctx", "1024", "--prefix-cache-mb", "0",
                   "--max-sessions", "0") as srv:
            total = metric(srv, 'lockstep_kv_blocks_free{model="smol"}')
            # End-of-turn ids banned: only the disconnect can end it before 900 tokens (~20 s).
            conn, resp = open_stream(srv, dict(BODY, max_tokens=900,
                                               logit_bias={"0": -100, "1": -100, "2": -100}))
            for _ in range(12):  # six chunks: the sequence is running
                resp.readline()
            self.assertGreater(metric(srv, 'lockstep_kv_blocks_used{model="smol"}'), 0)
            conn.sock.shutdown(2)
            conn.close()
            deadline = time.time() + 5
            while time.time() < deadline:
                if metric(srv, 'lockstep_admitted_sequences{model="smol"}') == 0:
                    break
                time.sleep(0.1)
            self.assertEqual(metric(srv, 'lockstep_admitted_sequences{model="smol"}'), 0)
            self.assertEqual(metric(srv, 'lockstep_kv_blocks_free{model="smol"}'), total)
            self.assertLess(metric(srv, "lockstep_generated_tokens_total"), 900)

    def test_disconnect_cancels_non_streaming_request(self):
        # A non-streaming reply is written only at the end, so no failed write can tell the
        # server its client left: it watches the connection's socket while the engine works.
        with serve("--model", f"smol={MODEL}", "--ctx", "1024", "--prefix-cache-mb", "0",
                   "--max-sessions", "0") as srv:
            total = metric(srv, 'lockstep_kv_blocks_free{model="smol"}')
            kept = dict(BODY, stream=False, max_tokens=48,
                        messages=[{"role": "user", "content": "Name three colours."}])
            status, _, alone = srv.post("/v1/chat/completions", kept)
            self.assertEqual(status, 200, alone)
            gone = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
            gone.request("POST", "/v1/chat/completions",
                         json.dumps(dict(BODY, stream=False, max_tokens=900,
                                         logit_bias={"0": -100, "1": -100, "2": -100})),
                         {"Content-Type": "application/json"})
            deadline = time.time() + 30
            while metric(srv, 'lockstep_kv_blocks_used{model="smol"}') == 0:
                self.assertLess(time.time(), deadline, "the long request never started")
                time.sleep(0.05)
            result = {}
            left_alone = threading.Thread(
                target=lambda: result.update(r=srv.post("/v1/chat/completions", kept)))
            left_alone.start()
            time.sleep(0.3)  # the kept request is admitted and running beside the long one
            gone.sock.shutdown(socket.SHUT_RDWR)
            gone.close()
            deadline = time.time() + 5
            while time.time() < deadline and metric(srv, "lockstep_requests_total"
                                                    '{endpoint="chat",status="499"}', 0) == 0:
                time.sleep(0.1)
            left_alone.join(60)
            self.assertFalse(left_alone.is_alive())
            status, _, r = result["r"]
            self.assertEqual(status, 200, r)
            self.assertEqual(r["choices"][0]["message"]["content"],
                             alone["choices"][0]["message"]["content"])
            self.assertEqual(metric(srv, 'lockstep_requests_total{endpoint="chat",status="499"}', 0), 1)
            deadline = time.time() + 5  # the engine thread takes the cancel at its next step
            while time.time() < deadline and metric(srv, 'lockstep_admitted_sequences{model="smol"}'):
                time.sleep(0.1)
            self.assertEqual(metric(srv, 'lockstep_admitted_sequences{model="smol"}'), 0)
            self.assertEqual(metric(srv, 'lockstep_kv_blocks_free{model="smol"}'), total)
            # Both kept requests' tokens and the long one's few: it did not run to 900.
            self.assertLess(metric(srv, "lockstep_generated_tokens_total"), 400)

    def test_stream_closed_during_prefill_generates_nothing(self):
        # A stream has nothing to write while its prompt is prefilled, so no failed write can
        # tell that its client left: the socket is looked at, and the prefill stops there.
        with serve("--model", f"smol={MODEL}", "--ctx", "2048", "--step-tokens", "64",
                   "--prefix-cache-mb", "0", "--max-sessions", "0") as srv:
            total = metric(srv, 'lockstep_kv_blocks_free{model="smol"}')
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
            conn.request("POST", "/v1/completions", json.dumps(dict(
                model="smol", prompt="word " * 1800, max_tokens=16, temperature=0, stream=True)),
                {"Content-Type": "application/json"})
            self.assertEqual(conn.getresponse().status, 200)
            deadline = time.time() + 30
            while metric(srv, 'lockstep_kv_blocks_used{model="smol"}') == 0:
                self.assertLess(time.time(), deadline, "the prefill never started")
                time.sleep(0.02)
            conn.sock.shutdown(socket.SHUT_RDWR)
            conn.close()
            deadline = time.time() + 30
            while time.time() < deadline and metric(srv, 'lockstep_admitted_sequences{model="smol"}'):
                time.sleep(0.05)
            self.assertEqual(metric(srv, 'lockstep_admitted_sequences{model="smol"}'), 0)
            self.assertEqual(metric(srv, 'lockstep_kv_blocks_free{model="smol"}'), total)
            self.assertEqual(metric(srv, "lockstep_generated_tokens_total"), 0)

    def test_sigterm_drains(self):
        with serve("--model", f"smol={MODEL}", "--ctx", "512") as srv:
            conn, resp = open_stream(srv, dict(BODY, max_tokens=120))
            resp.readline()
            srv.proc.send_signal(signal.SIGTERM)
            time.sleep(0.2)
            status, _, body = srv.post("/v1/chat/completions", dict(BODY, stream=False, max_tokens=2))
            self.assertEqual(status, 503, body)
            self.assertEqual(body["error"]["code"], "draining")
            rest = resp.read().decode()
            conn.close()
            self.assertRegex(rest, r'"finish_reason":"(stop|length)"')
            self.assertTrue(rest.rstrip().endswith("data: [DONE]"))
            self.assertEqual(srv.proc.wait(timeout=30), 0, srv.text())


class BootErrors(unittest.TestCase):
    def boot(self, *args, env=None):
        e = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
        e.update(env or {})
        r = subprocess.run([BIN, "serve", "--port", "0", *args], capture_output=True, text=True,
                           timeout=120, env=e)
        self.assertEqual(r.returncode, 2, r.stderr)
        return r.stderr

    def test_each_names_its_cause(self):
        self.assertIn("--model", self.boot("--model", "a=/nonexistent/x.gguf"))
        self.assertIn("/nonexistent/x.gguf", self.boot("--model", "a=/nonexistent/x.gguf"))
        self.assertIn("LOCKSTEP_SERVE_MODLES", self.boot(env={"LOCKSTEP_SERVE_MODLES": "x"}))
        self.assertIn("--frobnicate", self.boot("--frobnicate"))
        err = self.boot("--model", f"a={MODEL}+gemma3-270m")
        self.assertIn("draft", err)
        self.assertIn("--kv-mb", self.boot("--model", f"a={MODEL}", "--ctx", "2048", "--kv-mb", "1"))
        self.assertIn("--api-key-file", self.boot("--model", f"a={MODEL}", "--api-key-file", "/nope"))
        self.assertIn("'b'", self.boot("--model", f"a={MODEL}", "--chat-template", f"b={BIN}"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
